//! The MOUNT protocol version 3 service (RFC 1813 appendix I, program 100005): how an NFSv3
//! client gets the root handle of an export. Transport-independent: a call message in, a
//! reply message out ([`MountService::dispatch`]); it runs over TCP (the ONC RPC-over-TCP
//! crate) next to NFS over RDMA.
//!
//! Procedures: NULL, MNT (the root handle and the auth flavors, `[AUTH_SYS]`), DUMP (the
//! mounts recorded), UMNT, UMNTALL, EXPORT (the export list with their groups). What is
//! exported and who mounted what is the [`Exports`] implementation's business. RPC-level
//! refusals are [`onc_rpc::svc::accept_call`]'s; arguments that do not decode (a `dirpath` over
//! [`MNTPATHLEN`] bytes included) are GARBAGE_ARGS. The protocol's numbers and result codecs
//! are `nfs_proto::mount`'s.

use alloc::vec::Vec;

use mbuf::Chain;

use nfs_proto::mount::{
    MountRes3, Mountstat3, MNTNAMLEN, MNTPATHLEN, MOUNTPROC3_DUMP, MOUNTPROC3_EXPORT,
    MOUNTPROC3_MNT, MOUNTPROC3_UMNT, MOUNTPROC3_UMNTALL, MOUNT_PROGRAM, MOUNT_V3,
};
use nfs_proto::nfs3::{NfsFh3, NFS3_FHSIZE};
use onc_rpc::rpc::{AcceptStat, AUTH_SYS};
use onc_rpc::svc::{
    accept_call, header_bytes, refusal, success_encoder, AuthPolicy, Cred, Program, Refusal,
};
use onc_rpc::xdr::{Decoder, Encoder, XdrError};

use crate::nfsd::DispatchError;

/// EXPORT's visitor: called with each export's directory and groups.
pub type ExportVisitor<'a> = dyn FnMut(&[u8], &[&[u8]]) + 'a;

/// What is exported, and the record of who mounted what. `client` is the caller as the
/// transport names it (its address); calls may come from several threads (`&self`).
pub trait Exports {
    /// MNT: the root handle of the export `path` for `client` (and record the mount), or
    /// why not (`MNT3ERR_NOENT`, `MNT3ERR_ACCES`, …).
    fn mnt(&self, cred: &Cred<'_>, client: &[u8], path: &[u8]) -> Result<NfsFh3, Mountstat3>;
    /// UMNT: forget `client`'s mount of `path`.
    fn umnt(&self, client: &[u8], path: &[u8]);
    /// UMNTALL: forget every mount of `client`.
    fn umntall(&self, client: &[u8]);
    /// DUMP: `f(host, directory)` for each mount recorded.
    fn dump(&self, f: &mut dyn FnMut(&[u8], &[u8]));
    /// EXPORT: `f(directory, groups)` for each export (no groups: everyone).
    fn exports(&self, f: &mut ExportVisitor<'_>);
}

/// Shared exports are exports: `Arc<E>` and `&E` forward every call.
macro_rules! forward_exports {
    ($($t:ty),*) => {$(
        impl<E: Exports + ?Sized> Exports for $t {
            fn mnt(&self, c: &Cred<'_>, client: &[u8], path: &[u8]) -> Result<NfsFh3, Mountstat3> {
                (**self).mnt(c, client, path)
            }
            fn umnt(&self, client: &[u8], path: &[u8]) {
                (**self).umnt(client, path)
            }
            fn umntall(&self, client: &[u8]) {
                (**self).umntall(client)
            }
            fn dump(&self, f: &mut dyn FnMut(&[u8], &[u8])) {
                (**self).dump(f)
            }
            fn exports(&self, f: &mut ExportVisitor<'_>) {
                (**self).exports(f)
            }
        }
    )*};
}

forward_exports!(alloc::sync::Arc<E>, &E);

/// The MOUNT v3 program served by [`MountService`].
pub const fn mount_program(auth: AuthPolicy) -> Program {
    Program {
        prog: MOUNT_PROGRAM,
        low: MOUNT_V3,
        high: MOUNT_V3,
        nprocs: MOUNTPROC3_EXPORT + 1,
        auth,
    }
}

/// The MOUNT v3 service over an [`Exports`].
pub struct MountService<E> {
    exports: E,
    auth: AuthPolicy,
}

fn put_name(e: &mut Encoder, b: &[u8], max: usize) {
    if b.len() > max {
        e.fail();
    } else {
        e.opaque(b);
    }
}

impl<E: Exports> MountService<E> {
    /// A service over `exports` with credential policy `auth`.
    pub fn new(exports: E, auth: AuthPolicy) -> Self {
        MountService { exports, auth }
    }

    /// The exports.
    pub fn exports(&self) -> &E {
        &self.exports
    }

    /// Serve one call message from `client`; the reply message.
    ///
    /// # Errors
    /// [`DispatchError::NotACall`]: not answered; [`DispatchError::Alloc`].
    pub fn dispatch(&self, call: &[u8], client: &[u8]) -> Result<Vec<u8>, DispatchError> {
        let acc = match accept_call(call, &mount_program(self.auth)) {
            Ok(a) => a,
            Err(Refusal::Drop) => return Err(DispatchError::NotACall),
            Err(Refusal::Reply(h)) => return header_bytes(&h).map_err(|_| DispatchError::Alloc),
        };
        let xid = acc.header.xid;
        let mut d = acc.args;
        let cred = Cred::of(&acc.header);
        let mut e = success_encoder(xid);
        let ran = self.run(acc.header.proc_, &cred, client, &mut d, &mut e);
        let stat = match ran {
            Ok(()) => match e.finish() {
                Ok(b) => return Ok(b),
                Err(_) => AcceptStat::SystemErr,
            },
            Err(_) => AcceptStat::GarbageArgs,
        };
        header_bytes(&refusal(xid, stat)).map_err(|_| DispatchError::Alloc)
    }

    /// [`MountService::dispatch`] for a call that came as a chain (over RDMA).
    ///
    /// # Errors
    /// As [`MountService::dispatch`].
    pub fn dispatch_chain(&self, call: &Chain, client: &[u8]) -> Result<Chain, DispatchError> {
        let b = call.to_vec().map_err(|_| DispatchError::Alloc)?;
        let r = self.dispatch(&b, client)?;
        Chain::from_bytes(&r).map_err(|_| DispatchError::Alloc)
    }

    fn run(
        &self,
        proc_: u32,
        cred: &Cred<'_>,
        client: &[u8],
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> Result<(), XdrError> {
        match proc_ {
            MOUNTPROC3_MNT => {
                let path = d.opaque("dirpath", MNTPATHLEN)?;
                let r = match self.exports.mnt(cred, client, path) {
                    Ok(fhandle) if fhandle.data.len() <= NFS3_FHSIZE => MountRes3::Ok {
                        fhandle,
                        auth_flavors: alloc::vec![AUTH_SYS],
                    },
                    Ok(_) => MountRes3::Fail(Mountstat3::ERR_SERVERFAULT),
                    Err(Mountstat3::OK) => MountRes3::Fail(Mountstat3::ERR_SERVERFAULT),
                    Err(s) => MountRes3::Fail(s),
                };
                r.encode(e);
            }
            MOUNTPROC3_DUMP => {
                self.exports.dump(&mut |host, dir| {
                    e.bool(true);
                    put_name(e, host, MNTNAMLEN);
                    put_name(e, dir, MNTPATHLEN);
                });
                e.bool(false);
            }
            MOUNTPROC3_UMNT => {
                let path = d.opaque("dirpath", MNTPATHLEN)?;
                self.exports.umnt(client, path);
            }
            MOUNTPROC3_UMNTALL => self.exports.umntall(client),
            MOUNTPROC3_EXPORT => {
                self.exports.exports(&mut |dir, groups| {
                    e.bool(true);
                    put_name(e, dir, MNTPATHLEN);
                    for g in groups {
                        e.bool(true);
                        put_name(e, g, MNTNAMLEN);
                    }
                    e.bool(false);
                });
                e.bool(false);
            }
            // NULL; accept_call refused every other number with PROC_UNAVAIL.
            _ => {}
        }
        Ok(())
    }
}
