//! NFS file handles: the kernel's own handle of the object, sealed with a keyed MAC.
//!
//! ```text
//! "KRN2" | MAC (8 bytes) | kernel handle type (i32, big-endian) | kernel handle (≤ 44 bytes)
//! ```
//!
//! * **Finding the object walks nothing.** The kernel handle ([`KernelFh`], what knfsd puts in
//!   its handles: inode and generation for ext4, xfs, tmpfs) opens the inode directly with
//!   `open_by_handle_at(2)`; a handle the server never saw (after a restart) costs what a
//!   known one costs, and a removed object (or a reused inode number) is `NFS3ERR_STALE`.
//! * **A client cannot forge one.** The MAC is SipHash-2-4 under a 128-bit key
//!   ([`HandleKey`], kept by the server in a 0600 file so handles survive a restart) over the
//!   export root's kernel handle and the object's. Without it a client could guess a kernel
//!   handle (tmpfs and btrfs generations are counters) and open any inode of the file
//!   system, inside the export or not. Every handle the server gives out names an object it
//!   reached from the export root by single-component, no-symlink, no-mount-crossing steps
//!   ([`crate::localfs`]). A handle bound to another export root (or a re-created one) fails
//!   its MAC: `NFS3ERR_STALE`, as knfsd answers for an unknown export.
//! * What is left (as knfsd's default `no_subtree_check`): an object that a local user on the
//!   server moves out of the export keeps its handle.

use std::fs::{self, File, OpenOptions};
use std::hash::Hasher;
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use nfs_proto::nfs3::NfsFh3;
use nfs_service::nfsd::{NfsError, NfsResult};
use siphasher::sip::SipHasher24;

use crate::fhandle::KernelFh;

const MAGIC: &[u8; 4] = b"KRN2";
const MAC_LEN: usize = 8;
/// Bytes in front of the kernel handle.
const HEAD_LEN: usize = MAGIC.len() + MAC_LEN + 4;
/// The longest handle: 16 bytes of header + [`crate::fhandle::MAX_FH_BYTES`] (NFSv3 allows 64).
pub const MAX_HANDLE_LEN: usize = HEAD_LEN + crate::fhandle::MAX_FH_BYTES;

/// The server's secret for sealing handles.
#[derive(Clone)]
pub struct HandleKey([u8; 16]);

impl std::fmt::Debug for HandleKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HandleKey(..)")
    }
}

impl HandleKey {
    /// A key from its bytes.
    pub fn from_bytes(b: [u8; 16]) -> HandleKey {
        HandleKey(b)
    }

    /// A fresh random key (handles sealed with it die with the process).
    ///
    /// # Errors
    /// `/dev/urandom` cannot be read.
    pub fn random() -> io::Result<HandleKey> {
        let mut b = [0u8; 16];
        File::open("/dev/urandom")?.read_exact(&mut b)?;
        Ok(HandleKey(b))
    }

    /// The key kept in `path`, created (16 random bytes, mode 0600, its directory 0700 if
    /// missing) on first use.
    ///
    /// # Errors
    /// The file cannot be read or created, is not 16 bytes, or others may read it.
    pub fn load_or_create(path: &Path) -> io::Result<HandleKey> {
        let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
        match File::open(path) {
            Ok(mut f) => {
                let mode = f.metadata()?.permissions().mode();
                if mode & 0o077 != 0 {
                    return Err(bad(format!(
                        "{} may be read by others (mode {:o}): chmod 600 it",
                        path.display(),
                        mode & 0o777
                    )));
                }
                let mut b = Vec::new();
                f.read_to_end(&mut b)?;
                let b: [u8; 16] = b
                    .as_slice()
                    .try_into()
                    .map_err(|_| bad(format!("{} is not a 16-byte handle key", path.display())))?;
                Ok(HandleKey(b))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                    fs::DirBuilder::new()
                        .recursive(true)
                        .mode(0o700)
                        .create(dir)?;
                }
                let key = HandleKey::random()?;
                let mut f = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o600)
                    .open(path)?;
                f.write_all(&key.0)?;
                f.sync_all()?;
                Ok(key)
            }
            Err(e) => Err(e),
        }
    }
}

/// Seals and opens the handles of one export.
#[derive(Debug, Clone)]
pub struct Handles {
    key: HandleKey,
    root: KernelFh,
}

impl Handles {
    /// Handles of the export whose root's kernel handle is `root`.
    pub fn new(key: HandleKey, root: KernelFh) -> Handles {
        Handles { key, root }
    }

    fn mac(&self, obj: &KernelFh) -> [u8; MAC_LEN] {
        let k = &self.key.0;
        let (k0, k1) = k.split_at(8);
        let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or_default());
        let mut h = SipHasher24::new_with_keys(word(k0), word(k1));
        for fh in [&self.root, obj] {
            h.write(&fh.kind().to_be_bytes());
            h.write(&(fh.bytes().len() as u32).to_be_bytes());
            h.write(fh.bytes());
        }
        h.finish().to_be_bytes()
    }

    /// The NFS handle of `obj`.
    pub fn encode(&self, obj: &KernelFh) -> NfsFh3 {
        let mut data = Vec::with_capacity(HEAD_LEN + obj.bytes().len());
        data.extend_from_slice(MAGIC);
        data.extend_from_slice(&self.mac(obj));
        data.extend_from_slice(&obj.kind().to_be_bytes());
        data.extend_from_slice(obj.bytes());
        NfsFh3 { data }
    }

    /// The kernel handle sealed in `fh`: [`NfsError::BadHandle`] for bytes that are not a
    /// handle of ours, [`NfsError::Stale`] for a MAC that does not match (another export,
    /// another key, a forgery).
    pub fn decode(&self, fh: &NfsFh3) -> NfsResult<KernelFh> {
        let b = &fh.data;
        if b.get(..MAGIC.len()) != Some(MAGIC.as_slice()) || b.len() > MAX_HANDLE_LEN {
            return Err(NfsError::BadHandle);
        }
        let mac = b
            .get(MAGIC.len()..MAGIC.len() + MAC_LEN)
            .ok_or(NfsError::BadHandle)?;
        let kind = b
            .get(MAGIC.len() + MAC_LEN..HEAD_LEN)
            .and_then(|k| k.try_into().ok())
            .map(i32::from_be_bytes)
            .ok_or(NfsError::BadHandle)?;
        let bytes = b.get(HEAD_LEN..).ok_or(NfsError::BadHandle)?;
        let obj = KernelFh::new(kind, bytes).ok_or(NfsError::BadHandle)?;
        // Compared without an early exit.
        let diff = self
            .mac(&obj)
            .iter()
            .zip(mac)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if diff != 0 {
            return Err(NfsError::Stale);
        }
        Ok(obj)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::indexing_slicing)]
mod tests {
    use super::*;

    fn kfh(b: &[u8]) -> KernelFh {
        KernelFh::new(1, b).unwrap()
    }

    #[test]
    fn handles_round_trip_and_refuse_forgeries() {
        let h = Handles::new(HandleKey::from_bytes([7; 16]), kfh(&[1, 2, 3, 4]));
        let obj = kfh(&[9; 12]);
        let fh = h.encode(&obj);
        assert_eq!(fh.data.len(), HEAD_LEN + 12);
        assert!(fh.data.len() <= 64);
        assert_eq!(h.decode(&fh), Ok(obj));
        // Any changed bit of the kernel handle, its type or the MAC: stale.
        for i in MAGIC.len()..fh.data.len() {
            let mut f = fh.clone();
            f.data[i] ^= 1;
            assert_eq!(h.decode(&f), Err(NfsError::Stale), "byte {i}");
        }
        // Another key, another export root: stale.
        let other_key = Handles::new(HandleKey::from_bytes([8; 16]), kfh(&[1, 2, 3, 4]));
        assert_eq!(other_key.decode(&fh), Err(NfsError::Stale));
        let other_root = Handles::new(HandleKey::from_bytes([7; 16]), kfh(&[1, 2, 3, 5]));
        assert_eq!(other_root.decode(&fh), Err(NfsError::Stale));
        // Not ours at all.
        let mut bad = fh.clone();
        bad.data[0] = b'X';
        assert_eq!(h.decode(&bad), Err(NfsError::BadHandle));
        bad.data = b"KRN2".to_vec();
        assert_eq!(h.decode(&bad), Err(NfsError::BadHandle));
        bad.data = [b"KRN2".as_slice(), &[0; 61]].concat();
        assert_eq!(h.decode(&bad), Err(NfsError::BadHandle));
        // The handle of the old format (36 bytes, "KRN1").
        bad.data = [b"KRN1".as_slice(), &[0; 32]].concat();
        assert_eq!(h.decode(&bad), Err(NfsError::BadHandle));
    }

    #[test]
    fn the_key_file_is_created_private_and_read_back() {
        let dir = std::env::temp_dir().join(format!("nfsd-key-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        let p = dir.join("state/handle-key");
        let a = HandleKey::load_or_create(&p).unwrap();
        assert_eq!(
            fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(
            fs::metadata(p.parent().unwrap())
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o700
        );
        let b = HandleKey::load_or_create(&p).unwrap();
        assert_eq!(a.0, b.0);
        fs::set_permissions(&p, fs::Permissions::from_mode(0o644)).unwrap();
        let e = HandleKey::load_or_create(&p).unwrap_err().to_string();
        assert!(e.contains("chmod 600"), "{e}");
        fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        fs::write(&p, b"short").unwrap();
        assert!(HandleKey::load_or_create(&p).is_err());
        fs::remove_dir_all(&dir).unwrap();
    }
}
