//! File handles that survive a server restart.
//!
//! A handle is `magic "KRN1" | export root (st_dev, st_ino) | object (st_dev, st_ino)`, 36
//! bytes: nothing in it depends on the server process. The server turns a handle back into a
//! path with an inode → path map ([`InodeMap`]) filled by every LOOKUP, CREATE, READDIRPLUS,
//! … it answers; a handle the map does not know (the server restarted, or the path it knew
//! was renamed or removed) is found by walking the export once, which refills the whole map.
//!
//! Why not `name_to_handle_at` / `open_by_handle_at`: they need `CAP_DAC_READ_SEARCH` and
//! raw system calls (`unsafe` outside the shims, against the house rules), and a kernel
//! handle of up to 128 bytes does not fit NFSv3's 64 in general. The cost of the map is a walk
//! of the export after a restart or a rename of a directory; a reused inode number of a
//! removed file is not detected (there is no generation number in `stat`).

use std::collections::HashMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use nfs_glue::nfs3::NfsFh3;
use nfs_glue::nfsd::{NfsError, NfsResult};

const MAGIC: &[u8; 4] = b"KRN1";
/// Bytes of a handle.
pub const HANDLE_LEN: usize = 36;

/// An object's identity: (`st_dev`, `st_ino`).
pub type Ino = (u64, u64);

/// The identity of `m`.
pub fn ino_of(m: &fs::Metadata) -> Ino {
    (m.dev(), m.ino())
}

/// Encode the handle of `obj` in the export whose root is `root`.
pub fn encode(root: Ino, obj: Ino) -> NfsFh3 {
    let mut data = Vec::with_capacity(HANDLE_LEN);
    data.extend_from_slice(MAGIC);
    for v in [root.0, root.1, obj.0, obj.1] {
        data.extend_from_slice(&v.to_be_bytes());
    }
    NfsFh3 { data }
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    let s = b.get(at..at.checked_add(8)?)?;
    Some(u64::from_be_bytes(s.try_into().ok()?))
}

/// Decode a handle of the export `root`: the object, [`NfsError::BadHandle`] for bytes that
/// are not ours, [`NfsError::Stale`] for another export's (or a re-created export root's).
pub fn decode(root: Ino, fh: &NfsFh3) -> NfsResult<Ino> {
    let b = &fh.data;
    if b.len() != HANDLE_LEN || b.get(..4) != Some(MAGIC.as_slice()) {
        return Err(NfsError::BadHandle);
    }
    let field = |i: usize| u64_at(b, 4 + 8 * i).ok_or(NfsError::BadHandle);
    if (field(0)?, field(1)?) != root {
        return Err(NfsError::Stale);
    }
    Ok((field(2)?, field(3)?))
}

/// Where each known object lives, relative to nothing: absolute paths under the export.
#[derive(Debug)]
pub struct InodeMap {
    root: PathBuf,
    root_ino: Ino,
    paths: Mutex<HashMap<Ino, PathBuf>>,
}

impl InodeMap {
    /// A map of the export at `root` (absolute), whose identity is `root_ino`.
    pub fn new(root: PathBuf, root_ino: Ino) -> InodeMap {
        let mut m = HashMap::new();
        m.insert(root_ino, root.clone());
        InodeMap {
            root,
            root_ino,
            paths: Mutex::new(m),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Ino, PathBuf>> {
        self.paths.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remember that `ino` lives at `path`.
    pub fn insert(&self, ino: Ino, path: PathBuf) {
        self.lock().insert(ino, path);
    }

    /// The path of `ino` and its current metadata (not following a final symlink).
    ///
    /// # Errors
    /// [`NfsError::Stale`] when the export holds no such object (after a walk).
    pub fn resolve(&self, ino: Ino) -> NfsResult<(PathBuf, fs::Metadata)> {
        let known = self.lock().get(&ino).cloned();
        if let Some(p) = known {
            if let Ok(m) = fs::symlink_metadata(&p) {
                if ino_of(&m) == ino {
                    return Ok((p, m));
                }
            }
        }
        if ino == self.root_ino {
            return Err(NfsError::Stale);
        }
        self.rebuild();
        let p = self.lock().get(&ino).cloned().ok_or(NfsError::Stale)?;
        let m = fs::symlink_metadata(&p).map_err(|_| NfsError::Stale)?;
        if ino_of(&m) == ino {
            Ok((p, m))
        } else {
            Err(NfsError::Stale)
        }
    }

    /// Walk the export (same file system only, symlinks not followed) and record every
    /// object found.
    pub fn rebuild(&self) {
        let mut found = HashMap::new();
        found.insert(self.root_ino, self.root.clone());
        let mut stack = vec![self.root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(rd) = fs::read_dir(&dir) else { continue };
            for e in rd.flatten() {
                let Ok(m) = e.metadata() else { continue };
                if m.dev() != self.root_ino.0 {
                    continue;
                }
                let p = e.path();
                if m.is_dir() {
                    stack.push(p.clone());
                }
                found.insert(ino_of(&m), p);
            }
        }
        *self.lock() = found;
    }

    /// The export root.
    pub fn root(&self) -> &Path {
        &self.root
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    #[test]
    fn handles_round_trip_and_refuse_foreign_bytes() {
        let fh = encode((1, 2), (3, 4));
        assert_eq!(fh.data.len(), HANDLE_LEN);
        assert_eq!(decode((1, 2), &fh), Ok((3, 4)));
        assert_eq!(decode((1, 5), &fh), Err(NfsError::Stale));
        let mut bad = fh.clone();
        bad.data[0] = b'X';
        assert_eq!(decode((1, 2), &bad), Err(NfsError::BadHandle));
        bad.data.truncate(10);
        assert_eq!(decode((1, 2), &bad), Err(NfsError::BadHandle));
    }

    #[test]
    fn a_fresh_map_finds_objects_by_walking() {
        let dir = std::env::temp_dir().join(format!("nfsd-map-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("a/b")).unwrap();
        fs::write(dir.join("a/b/f"), b"x").unwrap();
        let root = ino_of(&fs::metadata(&dir).unwrap());
        let f = ino_of(&fs::metadata(dir.join("a/b/f")).unwrap());
        // A new map (a restarted server) knows only the root, and finds f by a walk.
        let map = InodeMap::new(dir.clone(), root);
        assert_eq!(map.resolve(f).unwrap().0, dir.join("a/b/f"));
        // Renamed behind the map's back: found again.
        fs::rename(dir.join("a"), dir.join("c")).unwrap();
        assert_eq!(map.resolve(f).unwrap().0, dir.join("c/b/f"));
        fs::remove_file(dir.join("c/b/f")).unwrap();
        assert_eq!(map.resolve(f).unwrap_err(), NfsError::Stale);
        fs::remove_dir_all(&dir).unwrap();
    }
}
