//! The state under the lock: nodes, directories, accounting, permissions.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;
use core::ops::Bound;

use mbuf::PageProvider;
use nfs_proto::nfs3::{
    Createverf3, Fattr3, Ftype3, Nfstime3, Sattr3, SetTime, Specdata3, NFS3_MAXNAMLEN,
};
use nfs_service::nfsd::{NfsError, NfsResult};
use onc_rpc::svc::Cred;

use crate::{BLOCK, FSID, MAX_FILE_SIZE};

/// Metadata charged per node against the capacity.
pub(crate) const NODE_CHARGE: u64 = 256;
/// Metadata charged per directory entry against the capacity, plus twice its name's length
/// (the name is kept by name and by cookie).
pub(crate) const ENTRY_CHARGE: u64 = 64;
/// The largest link count (PATHCONF `linkmax`).
pub(crate) const LINK_MAX: u32 = 65_000;
/// The cookie of ".", of "..", and the first cookie of a real entry.
pub(crate) const COOKIE_DOT: u64 = 1;
pub(crate) const COOKIE_DOTDOT: u64 = 2;
pub(crate) const COOKIE_FIRST: u64 = 3;

/// Permission bits asked of [`may`].
pub(crate) const R: u32 = 4;
pub(crate) const W: u32 = 2;
pub(crate) const X: u32 = 1;

/// The charge of a directory entry named `name`.
pub(crate) fn entry_charge(name: &[u8]) -> u64 {
    // Names are at most NFS3_MAXNAMLEN bytes (checked before any charge is taken).
    ENTRY_CHARGE + 2 * name.len() as u64
}

/// One entry of a directory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    pub(crate) cookie: u64,
    pub(crate) fileid: u64,
}

/// A directory: entries by name and by cookie (a cookie is given at insertion and never
/// reused, so a listing resumes after any cookie it handed out).
#[derive(Debug)]
pub(crate) struct Dir {
    pub(crate) names: BTreeMap<Vec<u8>, Entry>,
    pub(crate) cookies: BTreeMap<u64, Vec<u8>>,
    pub(crate) next_cookie: u64,
    /// The fileid of "..": the directory itself for the root.
    pub(crate) parent: u64,
}

impl Dir {
    pub(crate) fn new(parent: u64) -> Dir {
        Dir {
            names: BTreeMap::new(),
            cookies: BTreeMap::new(),
            next_cookie: COOKIE_FIRST,
            parent,
        }
    }
}

/// What a node holds.
#[derive(Debug)]
pub(crate) enum Data {
    /// A regular file: block index → page address (one reference held per page). Every block
    /// index is below `ceil(size / BLOCK)`; bytes of the last block past `size` are garbage.
    File(BTreeMap<u64, u64>),
    Dir(Dir),
    Link(Vec<u8>),
    /// FIFO, socket, character or block device.
    Special,
}

/// A file system object.
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) kind: Ftype3,
    pub(crate) mode: u32,
    pub(crate) nlink: u32,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) size: u64,
    pub(crate) rdev: Specdata3,
    pub(crate) atime: Nfstime3,
    pub(crate) mtime: Nfstime3,
    pub(crate) ctime: Nfstime3,
    /// Metadata bytes charged for this node (the node and a symlink's target).
    pub(crate) charge: u64,
    /// The verifier of the EXCLUSIVE create that made it.
    pub(crate) excl: Option<Createverf3>,
    pub(crate) data: Data,
}

impl Node {
    pub(crate) fn new(
        kind: Ftype3,
        mode: u32,
        uid: u32,
        gid: u32,
        now: Nfstime3,
        data: Data,
    ) -> Node {
        Node {
            kind,
            mode: mode & 0o7777,
            nlink: if kind == Ftype3::Dir { 2 } else { 1 },
            uid,
            gid,
            size: match &data {
                Data::Link(t) => t.len() as u64,
                _ => 0,
            },
            rdev: Specdata3::default(),
            atime: now,
            mtime: now,
            ctime: now,
            charge: NODE_CHARGE
                + match &data {
                    Data::Link(t) => t.len() as u64,
                    _ => 0,
                },
            excl: None,
            data,
        }
    }

    pub(crate) fn fattr(&self, fileid: u64) -> Fattr3 {
        let used = match &self.data {
            Data::File(b) => (b.len() as u64).saturating_mul(BLOCK),
            Data::Dir(_) => BLOCK,
            Data::Link(t) => t.len() as u64,
            Data::Special => 0,
        };
        Fattr3 {
            type_: self.kind,
            mode: self.mode,
            nlink: self.nlink,
            uid: self.uid,
            gid: self.gid,
            size: match &self.data {
                Data::Dir(_) => BLOCK,
                _ => self.size,
            },
            used,
            rdev: self.rdev,
            fsid: FSID,
            fileid,
            atime: self.atime,
            mtime: self.mtime,
            ctime: self.ctime,
        }
    }

    /// The directory this node is, or [`NfsError::NotDir`].
    pub(crate) fn as_dir(&self) -> NfsResult<&Dir> {
        match &self.data {
            Data::Dir(d) => Ok(d),
            _ => Err(NfsError::NotDir),
        }
    }

    pub(crate) fn is_dir(&self) -> bool {
        matches!(self.data, Data::Dir(_))
    }

    /// A regular file's blocks; [`NfsError::IsDir`] for a directory, [`NfsError::Inval`]
    /// for anything else.
    pub(crate) fn file_kind_check(&self) -> NfsResult<()> {
        match &self.data {
            Data::File(_) => Ok(()),
            Data::Dir(_) => Err(NfsError::IsDir),
            _ => Err(NfsError::Inval),
        }
    }
}

/// Two copies of `name` (the keys of an entry by name and by cookie), allocated before
/// anything changes.
pub(crate) fn name_keys(name: &[u8]) -> NfsResult<(Vec<u8>, Vec<u8>)> {
    let copy = || {
        let mut k = Vec::new();
        k.try_reserve_exact(name.len())
            .map_err(|_| NfsError::Jukebox)?;
        k.extend_from_slice(name);
        Ok(k)
    };
    Ok((copy()?, copy()?))
}

/// Whether `cred` is in group `gid`.
pub(crate) fn in_group(cred: &Cred<'_>, gid: u32) -> bool {
    cred.gid == gid || cred.gids.contains(&gid)
}

/// Whether `cred` has every permission bit of `want` (`R`, `W`, `X`) on `n`, POSIX style:
/// the owner class, else the group class, else other. Root has read and write always,
/// search on directories always, execute on a file with any execute bit.
pub(crate) fn may(cred: &Cred<'_>, n: &Node, want: u32) -> bool {
    if cred.uid == 0 {
        return want & X == 0 || n.is_dir() || n.mode & 0o111 != 0;
    }
    let bits = if cred.uid == n.uid {
        n.mode >> 6
    } else if in_group(cred, n.gid) {
        n.mode >> 3
    } else {
        n.mode
    } & 7;
    bits & want == want
}

/// Data access as a kernel NFS server allows it (knfsd's `NFSD_MAY_OWNER_OVERRIDE`): the
/// owner may read and write their file whatever its mode (a file created with mode 0444 is
/// written by the process that created it), and reading is allowed with execute permission
/// (an `exec` over NFS reads the file).
pub(crate) fn may_data(cred: &Cred<'_>, n: &Node, want: u32) -> bool {
    cred.uid == n.uid || may(cred, n, want) || (want == R && may(cred, n, X))
}

/// A new entry's name: [`NfsError::NameTooLong`] past 255 bytes, [`NfsError::Inval`] when
/// empty, "." or "..", or holding '/' or NUL.
pub(crate) fn check_name(name: &[u8]) -> NfsResult<()> {
    if name.len() > NFS3_MAXNAMLEN {
        return Err(NfsError::NameTooLong);
    }
    if name.is_empty() || name == b"." || name == b".." || name.iter().any(|&c| c == b'/' || c == 0)
    {
        return Err(NfsError::Inval);
    }
    Ok(())
}

/// Whether the sticky bit of `dir` keeps `cred` from removing or renaming `victim`.
pub(crate) fn sticky_denies(cred: &Cred<'_>, dir: &Node, victim: &Node) -> bool {
    dir.mode & 0o1000 != 0 && cred.uid != 0 && cred.uid != dir.uid && cred.uid != victim.uid
}

/// Check a SETATTR of `s` on `n` by `cred` (nothing is changed).
pub(crate) fn check_sattr(cred: &Cred<'_>, n: &Node, s: &Sattr3) -> NfsResult<()> {
    let root = cred.uid == 0;
    let owner = cred.uid == n.uid;
    if s.mode.is_some() && !root && !owner {
        return Err(NfsError::Perm);
    }
    if s.uid.is_some_and(|u| u != n.uid) && !root {
        return Err(NfsError::Perm);
    }
    if s.gid.is_some_and(|g| g != n.gid)
        && !root
        && !(owner && s.gid.is_some_and(|g| in_group(cred, g)))
    {
        return Err(NfsError::Perm);
    }
    if let Some(sz) = s.size {
        n.file_kind_check()?;
        if sz > MAX_FILE_SIZE {
            return Err(NfsError::FBig);
        }
        if !may_data(cred, n, W) {
            return Err(NfsError::Acces);
        }
    }
    for t in [s.atime, s.mtime] {
        match t {
            SetTime::DontChange => {}
            SetTime::ServerTime => {
                if !root && !owner && !may(cred, n, W) {
                    return Err(NfsError::Acces);
                }
            }
            SetTime::ClientTime(_) => {
                if !root && !owner {
                    return Err(NfsError::Perm);
                }
            }
        }
    }
    Ok(())
}

/// Apply the checked attributes of `s` to `n`, except the size (done by the caller with the
/// file's pages); ctime becomes `now`.
pub(crate) fn apply_sattr(cred: &Cred<'_>, n: &mut Node, s: &Sattr3, now: Nfstime3) {
    let (old_uid, old_gid) = (n.uid, n.gid);
    if let Some(u) = s.uid {
        n.uid = u;
    }
    if let Some(g) = s.gid {
        n.gid = g;
    }
    if let Some(m) = s.mode {
        n.mode = m & 0o7777;
        if cred.uid != 0 && !in_group(cred, n.gid) {
            n.mode &= !0o2000;
        }
    } else if (n.uid != old_uid || n.gid != old_gid) && !n.is_dir() {
        // chown clears set-user-id, and set-group-id of a group-executable file.
        n.mode &= !0o4000;
        if n.mode & 0o010 != 0 {
            n.mode &= !0o2000;
        }
    }
    match s.atime {
        SetTime::DontChange => {}
        SetTime::ServerTime => n.atime = now,
        SetTime::ClientTime(t) => n.atime = t,
    }
    match s.mtime {
        SetTime::DontChange => {
            if s.size.is_some() {
                n.mtime = now;
            }
        }
        SetTime::ServerTime => n.mtime = now,
        SetTime::ClientTime(t) => n.mtime = t,
    }
    n.ctime = now;
}

/// Everything the file system holds, under the embedding's lock (see
/// [`PageFs`](crate::PageFs)).
#[derive(Debug)]
pub struct FsState {
    pub(crate) nodes: BTreeMap<u64, Node>,
    pub(crate) next_fileid: u64,
    pub(crate) pages_held: u64,
    pub(crate) meta_bytes: u64,
    pub(crate) capacity: u64,
    pub(crate) max_nodes: u64,
}

impl FsState {
    pub(crate) fn bytes_used(&self) -> u64 {
        self.pages_held
            .saturating_mul(BLOCK)
            .saturating_add(self.meta_bytes)
    }

    /// [`NfsError::NoSpc`] unless `bytes` more bytes and `nodes` more nodes fit.
    pub(crate) fn room(&self, bytes: u64, nodes: u64) -> NfsResult<()> {
        let b = self
            .bytes_used()
            .checked_add(bytes)
            .ok_or(NfsError::NoSpc)?;
        let n = (self.nodes.len() as u64)
            .checked_add(nodes)
            .ok_or(NfsError::NoSpc)?;
        if b > self.capacity || n > self.max_nodes {
            return Err(NfsError::NoSpc);
        }
        Ok(())
    }

    pub(crate) fn node(&self, id: u64) -> NfsResult<&Node> {
        self.nodes.get(&id).ok_or(NfsError::Stale)
    }

    pub(crate) fn node_mut(&mut self, id: u64) -> NfsResult<&mut Node> {
        self.nodes.get_mut(&id).ok_or(NfsError::Stale)
    }

    pub(crate) fn dir_mut(&mut self, id: u64) -> NfsResult<&mut Dir> {
        match &mut self.node_mut(id)?.data {
            Data::Dir(d) => Ok(d),
            _ => Err(NfsError::NotDir),
        }
    }

    /// The fileid `name` names in directory `dir` ("." and ".." included).
    pub(crate) fn find(&self, dir: u64, name: &[u8]) -> NfsResult<u64> {
        let d = self.node(dir)?.as_dir()?;
        if name == b"." {
            return Ok(dir);
        }
        if name == b".." {
            return Ok(d.parent);
        }
        if name.len() > NFS3_MAXNAMLEN {
            return Err(NfsError::NameTooLong);
        }
        d.names.get(name).map(|e| e.fileid).ok_or(NfsError::NoEnt)
    }

    /// Insert a node (its charge must have been checked with [`FsState::room`]).
    pub(crate) fn add_node(&mut self, n: Node) -> NfsResult<u64> {
        let id = self.next_fileid;
        self.next_fileid = id.checked_add(1).ok_or(NfsError::NoSpc)?;
        self.meta_bytes = self.meta_bytes.saturating_add(n.charge);
        self.nodes.insert(id, n);
        Ok(id)
    }

    /// Add entry `keys` (from [`name_keys`]) → `fileid` to directory `dir` (charge checked
    /// by the caller).
    pub(crate) fn add_entry(
        &mut self,
        dir: u64,
        (key, key2): (Vec<u8>, Vec<u8>),
        fileid: u64,
    ) -> NfsResult<()> {
        let charge = entry_charge(&key);
        let d = self.dir_mut(dir)?;
        let cookie = d.next_cookie;
        d.next_cookie = cookie.checked_add(1).ok_or(NfsError::NoSpc)?;
        d.names.insert(key, Entry { cookie, fileid });
        d.cookies.insert(cookie, key2);
        self.meta_bytes = self.meta_bytes.saturating_add(charge);
        Ok(())
    }

    /// Remove entry `name` of directory `dir`; its fileid.
    pub(crate) fn remove_entry(&mut self, dir: u64, name: &[u8]) -> NfsResult<u64> {
        let d = self.dir_mut(dir)?;
        let e = d.names.remove(name).ok_or(NfsError::NoEnt)?;
        d.cookies.remove(&e.cookie);
        self.meta_bytes = self.meta_bytes.saturating_sub(entry_charge(name));
        Ok(e.fileid)
    }

    /// One link of `id` is gone: drop the node (and its pages) when none is left, or when
    /// it is a directory (its only link).
    pub(crate) fn drop_link(&mut self, pages: &dyn PageProvider, id: u64, now: Nfstime3) {
        let gone = match self.nodes.get_mut(&id) {
            Some(n) => {
                n.nlink = n.nlink.saturating_sub(1);
                n.ctime = now;
                n.nlink == 0 || n.is_dir()
            }
            None => false,
        };
        if gone {
            self.free_node(pages, id);
        }
    }

    /// Remove node `id`, releasing its pages and charges.
    pub(crate) fn free_node(&mut self, pages: &dyn PageProvider, id: u64) {
        if let Some(n) = self.nodes.remove(&id) {
            if let Data::File(blocks) = &n.data {
                for &addr in blocks.values() {
                    pages.page_unref(addr);
                }
                self.pages_held = self.pages_held.saturating_sub(blocks.len() as u64);
            }
            self.meta_bytes = self.meta_bytes.saturating_sub(n.charge);
        }
    }

    /// Release every page (the file system is going away).
    pub(crate) fn release_all(&mut self, pages: &dyn PageProvider) {
        for n in self.nodes.values_mut() {
            if let Data::File(blocks) = &mut n.data {
                while let Some((_, addr)) = blocks.pop_first() {
                    pages.page_unref(addr);
                }
            }
        }
        self.pages_held = 0;
    }

    /// Update a directory's mtime and ctime after a change of its entries.
    pub(crate) fn touch(&mut self, id: u64, now: Nfstime3) {
        if let Some(n) = self.nodes.get_mut(&id) {
            n.mtime = now;
            n.ctime = now;
        }
    }

    /// Whether `ancestor` is `id` or one of its ancestors.
    pub(crate) fn is_ancestor(&self, ancestor: u64, mut id: u64) -> bool {
        // Bounded: every step goes one level up, and there are at most `nodes` levels.
        for _ in 0..=self.nodes.len() {
            if id == ancestor {
                return true;
            }
            match self.nodes.get(&id).map(|n| &n.data) {
                Some(Data::Dir(d)) if d.parent != id => id = d.parent,
                _ => return false,
            }
        }
        false
    }

    /// The entries of directory `dir` from the first cookie after `cookie` (>= 3).
    pub(crate) fn entries_after(
        d: &Dir,
        cookie: u64,
    ) -> impl Iterator<Item = (u64, &[u8], u64)> + '_ {
        d.cookies
            .range((Bound::Excluded(cookie), Bound::Unbounded))
            .filter_map(move |(&c, name)| d.names.get(name).map(|e| (c, name.as_slice(), e.fileid)))
    }
}
