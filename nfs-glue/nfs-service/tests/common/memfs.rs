//! An in-memory file system behind the NFSv3 and MOUNT services, for the host tests: a map
//! of inodes. It is a test oracle, not product code (the served directory of
//! `userspace-harness nfsd` is a real one), hence here, with `std`.
//!
//! Handles are 16 bytes, `b"memfs\0\0\0"` and the inode number: a handle of another shape is
//! BADHANDLE, one whose inode is gone STALE. Directory cookies are 1-based positions in name
//! order, valid while the directory's change counter (the cookie verifier) is unchanged.
//! Every WRITE's iovec is logged (`writes`) so tests can check which pages reached it.

#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use mbuf::{Chain, PageProvider};
use nfs_proto::chain::PageSlice;
use nfs_proto::mount::Mountstat3;
use nfs_proto::nfs3::*;
use nfs_service::mount::{ExportVisitor, Exports};
use nfs_service::nfsd::{
    Backend, DirEnd, DirEntry, DirSink, NfsError, NfsResult, ReadData, WriteIov, Written,
};
use onc_rpc::svc::Cred;

/// The largest file the in-memory backend holds (its FSINFO `maxfilesize`): a peer's offset
/// or size beyond it is `NFS3ERR_FBIG`, never a heap allocation of that size.
const MAX_FILE_SIZE: usize = 1 << 30;

/// `size` as a file length, or `FBig` beyond [`MAX_FILE_SIZE`].
fn file_size(size: u64) -> NfsResult<usize> {
    usize::try_from(size)
        .ok()
        .filter(|&n| n <= MAX_FILE_SIZE)
        .ok_or(NfsError::FBig)
}

const MAGIC: &[u8; 8] = b"memfs\0\0\0";
pub const ROOT: u64 = 1;
pub const VERF: Writeverf3 = Writeverf3(*b"verf0001");

#[derive(Debug)]
enum Data {
    File(Vec<u8>),
    Dir(BTreeMap<Vec<u8>, u64>),
    Link(Vec<u8>),
    Special,
}

#[derive(Debug)]
struct Node {
    attr: Fattr3,
    data: Data,
    excl: Option<Createverf3>,
}

#[derive(Debug, Default)]
struct Inner {
    nodes: HashMap<u64, Node>,
    next: u64,
    clock: u32,
}

/// What a WRITE received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeenWrite {
    /// The pages of the call.
    Pages(Vec<PageSlice>),
    /// Inline bytes (their count).
    Bytes(usize),
}

#[derive(Debug, Default)]
pub struct MemFs {
    inner: Mutex<Inner>,
    pub writes: Mutex<Vec<SeenWrite>>,
    /// Do not log writes (allocation measurements).
    pub quiet: std::sync::atomic::AtomicBool,
    /// Misbehave: report every write UNSTABLE, whatever was asked.
    pub downgrade: std::sync::atomic::AtomicBool,
    pub mounts: Mutex<Vec<(Vec<u8>, Vec<u8>)>>,
}

pub fn fh(ino: u64) -> NfsFh3 {
    let mut data = MAGIC.to_vec();
    data.extend_from_slice(&ino.to_be_bytes());
    NfsFh3 { data }
}

fn ino(fh: &NfsFh3) -> NfsResult<u64> {
    match fh.data.split_at_checked(8) {
        Some((m, n)) if m == MAGIC && n.len() == 8 => Ok(u64::from_be_bytes(n.try_into().unwrap())),
        _ => Err(NfsError::BadHandle),
    }
}

fn attr(type_: Ftype3, mode: u32, cred: &Cred<'_>, ino: u64, t: u32) -> Fattr3 {
    let now = Nfstime3 {
        seconds: t,
        nseconds: 0,
    };
    Fattr3 {
        type_,
        mode,
        nlink: if type_ == Ftype3::Dir { 2 } else { 1 },
        uid: cred.uid,
        gid: cred.gid,
        size: 0,
        used: 0,
        rdev: Specdata3::default(),
        fsid: 7,
        fileid: ino,
        atime: now,
        mtime: now,
        ctime: now,
    }
}

impl Inner {
    fn tick(&mut self) -> Nfstime3 {
        self.clock += 1;
        Nfstime3 {
            seconds: self.clock,
            nseconds: 0,
        }
    }

    fn node(&self, fh: &NfsFh3) -> NfsResult<&Node> {
        self.nodes.get(&ino(fh)?).ok_or(NfsError::Stale)
    }

    fn node_mut(&mut self, fh: &NfsFh3) -> NfsResult<&mut Node> {
        let i = ino(fh)?;
        self.nodes.get_mut(&i).ok_or(NfsError::Stale)
    }

    fn dir(&self, fh: &NfsFh3) -> NfsResult<&BTreeMap<Vec<u8>, u64>> {
        match &self.node(fh)?.data {
            Data::Dir(d) => Ok(d),
            _ => Err(NfsError::NotDir),
        }
    }

    fn touch(&mut self, i: u64) {
        let t = self.tick();
        if let Some(n) = self.nodes.get_mut(&i) {
            n.attr.mtime = t;
            n.attr.ctime = t;
        }
    }

    fn apply(&mut self, i: u64, s: &Sattr3) -> NfsResult<()> {
        let t = self.tick();
        let n = self.nodes.get_mut(&i).ok_or(NfsError::Stale)?;
        if let Some(m) = s.mode {
            n.attr.mode = m & 0o7777;
        }
        if let Some(u) = s.uid {
            n.attr.uid = u;
        }
        if let Some(g) = s.gid {
            n.attr.gid = g;
        }
        if let Some(sz) = s.size {
            match &mut n.data {
                Data::File(v) => {
                    v.resize(file_size(sz)?, 0);
                    n.attr.size = sz;
                    n.attr.used = sz;
                }
                Data::Dir(_) => return Err(NfsError::IsDir),
                _ => return Err(NfsError::Inval),
            }
        }
        match s.atime {
            SetTime::DontChange => {}
            SetTime::ServerTime => n.attr.atime = t,
            SetTime::ClientTime(c) => n.attr.atime = c,
        }
        match s.mtime {
            SetTime::DontChange => {}
            SetTime::ServerTime => n.attr.mtime = t,
            SetTime::ClientTime(c) => n.attr.mtime = c,
        }
        n.attr.ctime = t;
        Ok(())
    }

    /// Add a new node named `name` in `dir`.
    fn make(
        &mut self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        name: &[u8],
        type_: Ftype3,
        mode: u32,
        data: Data,
    ) -> NfsResult<u64> {
        check_name(name)?;
        let d = ino(dir)?;
        if self.dir(dir)?.contains_key(name) {
            return Err(NfsError::Exist);
        }
        self.next += 1;
        let i = self.next;
        let t = self.tick().seconds;
        let mut a = attr(type_, mode, cred, i, t);
        if let Data::Link(p) = &data {
            a.size = p.len() as u64;
        }
        self.nodes.insert(
            i,
            Node {
                attr: a,
                data,
                excl: None,
            },
        );
        if let Some(Node {
            data: Data::Dir(m),
            attr,
            ..
        }) = self.nodes.get_mut(&d)
        {
            m.insert(name.to_vec(), i);
            if type_ == Ftype3::Dir {
                attr.nlink += 1;
            }
        }
        self.touch(d);
        Ok(i)
    }

    fn unlink(&mut self, dir: &NfsFh3, name: &[u8], want_dir: bool) -> NfsResult<()> {
        let d = ino(dir)?;
        let i = *self.dir(dir)?.get(name).ok_or(NfsError::NoEnt)?;
        let n = self.nodes.get(&i).ok_or(NfsError::Stale)?;
        match (&n.data, want_dir) {
            (Data::Dir(m), true) if !m.is_empty() => return Err(NfsError::NotEmpty),
            (Data::Dir(_), true) => {}
            (Data::Dir(_), false) => return Err(NfsError::IsDir),
            (_, true) => return Err(NfsError::NotDir),
            (_, false) => {}
        }
        if let Some(Node {
            data: Data::Dir(m),
            attr,
            ..
        }) = self.nodes.get_mut(&d)
        {
            m.remove(name);
            if want_dir {
                attr.nlink -= 1;
            }
        }
        let n = self.nodes.get_mut(&i).ok_or(NfsError::Stale)?;
        n.attr.nlink = n.attr.nlink.saturating_sub(1);
        if n.attr.nlink == 0 || want_dir {
            self.nodes.remove(&i);
        }
        self.touch(d);
        Ok(())
    }
}

fn check_name(name: &[u8]) -> NfsResult<()> {
    if name.is_empty() || name == b"." || name == b".." || name.contains(&b'/') {
        return Err(NfsError::Inval);
    }
    Ok(())
}

impl MemFs {
    pub fn new() -> MemFs {
        let fs = MemFs::default();
        {
            let mut g = fs.inner.lock().unwrap();
            g.next = ROOT;
            let root = Cred::none();
            let root = Cred {
                uid: 0,
                gid: 0,
                ..root
            };
            g.nodes.insert(
                ROOT,
                Node {
                    attr: attr(Ftype3::Dir, 0o755, &root, ROOT, 0),
                    data: Data::Dir(BTreeMap::new()),
                    excl: None,
                },
            );
        }
        fs
    }

    /// A file's bytes.
    pub fn contents(&self, fh: &NfsFh3) -> Option<Vec<u8>> {
        match &self.inner.lock().unwrap().node(fh).ok()?.data {
            Data::File(v) => Some(v.clone()),
            _ => None,
        }
    }

    pub fn last_write(&self) -> Option<SeenWrite> {
        self.writes.lock().unwrap().last().cloned()
    }
}

impl Backend for MemFs {
    fn getattr(&self, _: &Cred<'_>, fh: &NfsFh3) -> NfsResult<Fattr3> {
        Ok(self.inner.lock().unwrap().node(fh)?.attr.clone())
    }

    fn setattr(
        &self,
        _: &Cred<'_>,
        fh: &NfsFh3,
        attrs: &Sattr3,
        guard: Option<Nfstime3>,
    ) -> NfsResult<()> {
        let mut g = self.inner.lock().unwrap();
        let n = g.node(fh)?;
        if guard.is_some_and(|t| t != n.attr.ctime) {
            return Err(NfsError::NotSync);
        }
        let i = ino(fh)?;
        g.apply(i, attrs)
    }

    fn lookup(&self, _: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsResult<NfsFh3> {
        let g = self.inner.lock().unwrap();
        if name == b"." {
            g.dir(dir)?;
            return Ok(dir.clone());
        }
        g.dir(dir)?.get(name).map(|i| fh(*i)).ok_or(NfsError::NoEnt)
    }

    fn access(&self, cred: &Cred<'_>, fh: &NfsFh3, mask: u32) -> NfsResult<u32> {
        let g = self.inner.lock().unwrap();
        let a = &g.node(fh)?.attr;
        let bits = if cred.uid == 0 {
            7
        } else if cred.uid == a.uid {
            a.mode >> 6 & 7
        } else {
            a.mode & 7
        };
        let mut ok = 0;
        if bits & 4 != 0 {
            ok |= ACCESS3_READ | ACCESS3_LOOKUP;
        }
        if bits & 2 != 0 {
            ok |= ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE;
        }
        if bits & 1 != 0 {
            ok |= ACCESS3_EXECUTE | ACCESS3_LOOKUP;
        }
        Ok(ok & mask)
    }

    fn readlink(&self, _: &Cred<'_>, fh: &NfsFh3) -> NfsResult<Nfspath3> {
        match &self.inner.lock().unwrap().node(fh)?.data {
            Data::Link(p) => Ok(Nfspath3(p.clone())),
            _ => Err(NfsError::Inval),
        }
    }

    fn read(
        &self,
        _: &Cred<'_>,
        fh: &NfsFh3,
        offset: u64,
        count: u32,
        pages: &Arc<dyn PageProvider>,
    ) -> NfsResult<ReadData> {
        let g = self.inner.lock().unwrap();
        let Data::File(v) = &g.node(fh)?.data else {
            return Err(NfsError::IsDir);
        };
        let off = usize::try_from(offset).unwrap_or(usize::MAX).min(v.len());
        let n = (count as usize).min(v.len() - off);
        let mut data = Chain::alloc_pages(pages, n).map_err(|_| NfsError::Jukebox)?;
        data.copyback(0, &v[off..off + n])
            .map_err(|_| NfsError::Io)?;
        Ok(ReadData {
            data,
            eof: off + n == v.len(),
        })
    }

    fn write(
        &self,
        _: &Cred<'_>,
        fh: &NfsFh3,
        offset: u64,
        stable: StableHow,
        data: WriteIov<'_>,
    ) -> NfsResult<Written> {
        let mut g = self.inner.lock().unwrap();
        let t = g.tick();
        let n = g.node_mut(fh)?;
        let Data::File(v) = &mut n.data else {
            return Err(NfsError::IsDir);
        };
        let end = file_size(offset.saturating_add(data.len() as u64))?;
        let off = end - data.len();
        if v.len() < end {
            v.resize(end, 0);
        }
        let seen = match data {
            WriteIov::Pages { provider, slices } => {
                let mut at = off;
                for s in slices {
                    provider
                        .read_page(s.addr, s.offset, &mut v[at..at + s.len])
                        .map_err(|_| NfsError::Io)?;
                    at += s.len;
                }
                SeenWrite::Pages(if self.quiet.load(std::sync::atomic::Ordering::Relaxed) {
                    Vec::new()
                } else {
                    slices.to_vec()
                })
            }
            WriteIov::Bytes(b) => {
                v[off..end].copy_from_slice(b);
                SeenWrite::Bytes(b.len())
            }
        };
        n.attr.size = v.len() as u64;
        n.attr.used = n.attr.size;
        n.attr.mtime = t;
        n.attr.ctime = t;
        if !self.quiet.load(std::sync::atomic::Ordering::Relaxed) {
            self.writes.lock().unwrap().push(seen);
        }
        let committed = if self.downgrade.load(std::sync::atomic::Ordering::Relaxed) {
            StableHow::Unstable
        } else {
            stable
        };
        Ok(Written {
            count: data.len() as u32,
            committed,
            verf: VERF,
        })
    }

    fn create(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        name: &[u8],
        how: &Createhow3,
    ) -> NfsResult<NfsFh3> {
        let mut g = self.inner.lock().unwrap();
        let existing = g.dir(dir)?.get(name).copied();
        match (how, existing) {
            (Createhow3::Unchecked(s), Some(i)) => {
                g.apply(i, s)?;
                Ok(fh(i))
            }
            (Createhow3::Guarded(_), Some(_)) => Err(NfsError::Exist),
            (Createhow3::Exclusive(v), Some(i)) => match g.nodes.get(&i) {
                Some(n) if n.excl == Some(*v) => Ok(fh(i)),
                _ => Err(NfsError::Exist),
            },
            (Createhow3::Unchecked(s) | Createhow3::Guarded(s), None) => {
                let i = g.make(
                    cred,
                    dir,
                    name,
                    Ftype3::Reg,
                    s.mode.unwrap_or(0o644),
                    Data::File(Vec::new()),
                )?;
                g.apply(
                    i,
                    &Sattr3 {
                        mode: None,
                        ..s.clone()
                    },
                )?;
                Ok(fh(i))
            }
            (Createhow3::Exclusive(v), None) => {
                let i = g.make(cred, dir, name, Ftype3::Reg, 0o600, Data::File(Vec::new()))?;
                if let Some(n) = g.nodes.get_mut(&i) {
                    n.excl = Some(*v);
                }
                Ok(fh(i))
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
        let mut g = self.inner.lock().unwrap();
        let i = g.make(
            cred,
            dir,
            name,
            Ftype3::Dir,
            attrs.mode.unwrap_or(0o755),
            Data::Dir(BTreeMap::new()),
        )?;
        Ok(fh(i))
    }

    fn symlink(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        name: &[u8],
        _: &Sattr3,
        target: &[u8],
    ) -> NfsResult<NfsFh3> {
        let mut g = self.inner.lock().unwrap();
        let i = g.make(
            cred,
            dir,
            name,
            Ftype3::Lnk,
            0o777,
            Data::Link(target.to_vec()),
        )?;
        Ok(fh(i))
    }

    fn mknod(
        &self,
        cred: &Cred<'_>,
        dir: &NfsFh3,
        name: &[u8],
        what: &Mknoddata3,
    ) -> NfsResult<NfsFh3> {
        let (t, a) = match what {
            Mknoddata3::Chr(d) => (Ftype3::Chr, &d.dev_attributes),
            Mknoddata3::Blk(d) => (Ftype3::Blk, &d.dev_attributes),
            Mknoddata3::Sock(a) => (Ftype3::Sock, a),
            Mknoddata3::Fifo(a) => (Ftype3::Fifo, a),
            Mknoddata3::Other(_) => return Err(NfsError::BadType),
        };
        let mut g = self.inner.lock().unwrap();
        let i = g.make(cred, dir, name, t, a.mode.unwrap_or(0o644), Data::Special)?;
        Ok(fh(i))
    }

    fn remove(&self, _: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsResult<()> {
        self.inner.lock().unwrap().unlink(dir, name, false)
    }

    fn rmdir(&self, _: &Cred<'_>, dir: &NfsFh3, name: &[u8]) -> NfsResult<()> {
        self.inner.lock().unwrap().unlink(dir, name, true)
    }

    fn rename(
        &self,
        _: &Cred<'_>,
        from_dir: &NfsFh3,
        from: &[u8],
        to_dir: &NfsFh3,
        to: &[u8],
    ) -> NfsResult<()> {
        let mut g = self.inner.lock().unwrap();
        check_name(to)?;
        let i = *g.dir(from_dir)?.get(from).ok_or(NfsError::NoEnt)?;
        g.dir(to_dir)?;
        if let Some(&old) = g.dir(to_dir)?.get(to) {
            if old == i {
                return Ok(());
            }
            let is_dir = matches!(g.nodes.get(&old).map(|n| &n.data), Some(Data::Dir(_)));
            g.unlink(to_dir, to, is_dir)?;
        }
        let (f, t) = (ino(from_dir)?, ino(to_dir)?);
        if let Some(Node {
            data: Data::Dir(m), ..
        }) = g.nodes.get_mut(&f)
        {
            m.remove(from);
        }
        if let Some(Node {
            data: Data::Dir(m), ..
        }) = g.nodes.get_mut(&t)
        {
            m.insert(to.to_vec(), i);
        }
        g.touch(f);
        g.touch(t);
        Ok(())
    }

    fn link(&self, _: &Cred<'_>, file: &NfsFh3, dir: &NfsFh3, name: &[u8]) -> NfsResult<()> {
        let mut g = self.inner.lock().unwrap();
        check_name(name)?;
        let i = ino(file)?;
        if matches!(g.node(file)?.data, Data::Dir(_)) {
            return Err(NfsError::IsDir);
        }
        if g.dir(dir)?.contains_key(name) {
            return Err(NfsError::Exist);
        }
        let d = ino(dir)?;
        if let Some(Node {
            data: Data::Dir(m), ..
        }) = g.nodes.get_mut(&d)
        {
            m.insert(name.to_vec(), i);
        }
        let t = g.tick();
        if let Some(n) = g.nodes.get_mut(&i) {
            n.attr.nlink += 1;
            n.attr.ctime = t;
        }
        g.touch(d);
        Ok(())
    }

    fn readdir(
        &self,
        _: &Cred<'_>,
        dir: &NfsFh3,
        cookie: u64,
        verf: Cookieverf3,
        sink: &mut dyn DirSink,
    ) -> NfsResult<DirEnd> {
        let g = self.inner.lock().unwrap();
        let m = g.dir(dir)?;
        let mine = Cookieverf3(u64::from(g.node(dir)?.attr.mtime.seconds).to_be_bytes());
        if cookie != 0 && verf != mine {
            return Err(NfsError::BadCookie);
        }
        let skip = usize::try_from(cookie).map_err(|_| NfsError::BadCookie)?;
        if skip > m.len() {
            return Err(NfsError::BadCookie);
        }
        let plus = sink.wants_plus();
        for (k, (name, i)) in m.iter().enumerate().skip(skip) {
            let n = g.nodes.get(i).ok_or(NfsError::ServerFault)?;
            let h = fh(*i);
            let e = DirEntry {
                fileid: *i,
                name,
                cookie: k as u64 + 1,
                attr: plus.then_some(&n.attr),
                fh: plus.then_some(&h.data[..]),
            };
            if !sink.entry(&e) {
                return Ok(DirEnd {
                    verf: mine,
                    eof: false,
                });
            }
        }
        Ok(DirEnd {
            verf: mine,
            eof: true,
        })
    }

    fn fsstat(&self, _: &Cred<'_>, fh: &NfsFh3) -> NfsResult<FsstatResOk> {
        let g = self.inner.lock().unwrap();
        g.node(fh)?;
        Ok(FsstatResOk {
            obj_attributes: None,
            tbytes: 1 << 30,
            fbytes: 1 << 29,
            abytes: 1 << 29,
            tfiles: 1 << 20,
            ffiles: (1 << 20) - g.nodes.len() as u64,
            afiles: (1 << 20) - g.nodes.len() as u64,
            invarsec: 0,
        })
    }

    fn fsinfo(&self, _: &Cred<'_>, fh: &NfsFh3) -> NfsResult<FsinfoResOk> {
        self.inner.lock().unwrap().node(fh)?;
        Ok(FsinfoResOk {
            obj_attributes: None,
            rtmax: 4 << 20,
            rtpref: 4 << 20,
            rtmult: 4096,
            wtmax: 4 << 20,
            wtpref: 4 << 20,
            wtmult: 4096,
            dtpref: 65536,
            maxfilesize: MAX_FILE_SIZE as u64,
            time_delta: Nfstime3 {
                seconds: 0,
                nseconds: 1,
            },
            properties: FSF3_LINK | FSF3_SYMLINK | FSF3_HOMOGENEOUS | FSF3_CANSETTIME,
        })
    }

    fn pathconf(&self, _: &Cred<'_>, fh: &NfsFh3) -> NfsResult<PathconfResOk> {
        self.inner.lock().unwrap().node(fh)?;
        Ok(PathconfResOk {
            obj_attributes: None,
            linkmax: 32_000,
            name_max: 255,
            no_trunc: true,
            chown_restricted: true,
            case_insensitive: false,
            case_preserving: true,
        })
    }

    fn commit(&self, _: &Cred<'_>, fh: &NfsFh3, _: u64, _: u32) -> NfsResult<Writeverf3> {
        self.inner.lock().unwrap().node(fh)?;
        Ok(VERF)
    }
}

/// One export, "/export", of the root.
impl Exports for MemFs {
    fn mnt(&self, _: &Cred<'_>, client: &[u8], path: &[u8]) -> Result<NfsFh3, Mountstat3> {
        if path != b"/export" {
            return Err(Mountstat3::ERR_NOENT);
        }
        self.mounts
            .lock()
            .unwrap()
            .push((client.to_vec(), path.to_vec()));
        Ok(fh(ROOT))
    }

    fn umnt(&self, client: &[u8], path: &[u8]) {
        self.mounts
            .lock()
            .unwrap()
            .retain(|(c, p)| !(c == client && p == path));
    }

    fn umntall(&self, client: &[u8]) {
        self.mounts.lock().unwrap().retain(|(c, _)| c != client);
    }

    fn dump(&self, f: &mut dyn FnMut(&[u8], &[u8])) {
        for (c, p) in self.mounts.lock().unwrap().iter() {
            f(c, p);
        }
    }

    fn exports(&self, f: &mut ExportVisitor<'_>) {
        f(b"/export", &[b"10.0.0.0/8", b"vm"]);
    }
}
