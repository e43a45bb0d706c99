//! The one export of `nfsd --export DIR`, as MOUNT v3 sees it ([`Exports`]).

use std::os::unix::ffi::OsStrExt;
use std::sync::{Arc, Mutex};

use nfs_glue::mount::{ExportVisitor, Exports, Mountstat3};
use nfs_glue::nfs3::NfsFh3;
use nfs_glue::svc::Cred;

use crate::localfs::LocalFs;

/// One exported directory and the mounts recorded (for DUMP).
#[derive(Debug)]
pub struct OneExport {
    fs: Arc<LocalFs>,
    /// The path clients mount: the directory as given on the command line.
    path: Vec<u8>,
    mounts: Mutex<Vec<(Vec<u8>, Vec<u8>)>>,
}

impl OneExport {
    /// Export `fs` as `path` (the name clients mount; its canonical form is accepted too).
    pub fn new(fs: Arc<LocalFs>, path: &[u8]) -> OneExport {
        OneExport {
            fs,
            path: path.to_vec(),
            mounts: Mutex::new(Vec::new()),
        }
    }

    fn mounts(&self) -> std::sync::MutexGuard<'_, Vec<(Vec<u8>, Vec<u8>)>> {
        self.mounts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_ours(&self, path: &[u8]) -> bool {
        let trim = |p: &[u8]| -> Vec<u8> {
            let mut v = p.to_vec();
            while v.len() > 1 && v.last() == Some(&b'/') {
                v.pop();
            }
            v
        };
        let p = trim(path);
        p == trim(&self.path) || p == self.fs.root_path().as_os_str().as_bytes()
    }
}

impl Exports for OneExport {
    fn mnt(&self, _cred: &Cred<'_>, client: &[u8], path: &[u8]) -> Result<NfsFh3, Mountstat3> {
        if !self.is_ours(path) {
            return Err(Mountstat3::ERR_ACCES);
        }
        let mut m = self.mounts();
        if !m.iter().any(|(c, p)| c == client && p == path) {
            m.push((client.to_vec(), path.to_vec()));
        }
        Ok(self.fs.root_fh())
    }

    fn umnt(&self, client: &[u8], path: &[u8]) {
        self.mounts().retain(|(c, p)| !(c == client && p == path));
    }

    fn umntall(&self, client: &[u8]) {
        self.mounts().retain(|(c, _)| c != client);
    }

    fn dump(&self, f: &mut dyn FnMut(&[u8], &[u8])) {
        for (c, p) in self.mounts().iter() {
            f(c, p);
        }
    }

    fn exports(&self, f: &mut ExportVisitor<'_>) {
        f(&self.path, &[]);
    }
}
