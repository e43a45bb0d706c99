//! The NFSv3 service (RFC 1813) over a [`Backend`], with Rick Macklem's DDP path: a received
//! call chain in, a reply chain out, transport-independent.
//!
//! # Chains in and out
//!
//! [`Nfs3Service::dispatch`] takes the call as the krpc-rdma Responder hands it up
//! (`[XDR][DDP marker][page mbufs][pad][XDR]` for a WRITE or SYMLINK whose data came in a
//! read chunk, plain XDR mbufs for an inline call, page mbufs only for a Long Call) and
//! returns the reply:
//!
//! * **WRITE**: the data region's page pieces ([`nfs_proto::chain::write_data_iovecs`]) reach
//!   [`Backend::write`] as [`WriteIov::Pages`], the very pages the transport placed the data
//!   in: nobody copies them on the way (only the XDR in front of the marker is copied, to be
//!   decoded). A small WRITE that came inline arrives as [`WriteIov::Bytes`].
//! * **READ**: [`Backend::read`] produces page mbufs (fresh pages of the service's
//!   [`PageProvider`] it fills, or pages it already holds); the reply is
//!   `[reply header + READ3resok up to the data length][DDP marker][those pages][pad]`
//!   ([`nfs_proto::chain::ddp_reply`]): the Responder RDMA-Writes the region into the client's
//!   write chunk, or sends it inline when the client offered none. An empty READ has no
//!   marker.
//! * **READLINK** answers inline (Linux's client offers a write chunk only for READ; a
//!   Responder returns an offered one unused).
//! * **READDIR / READDIRPLUS** stream entries from the backend straight into the reply's XDR,
//!   sized by [`dirbudget`] to honour `count` / `dircount` / `maxcount`
//!   (`NFS3ERR_TOOSMALL` when not one entry fits): a reply never exceeds what the client
//!   provisioned, so it fits its reply chunk.
//!
//! The transport learns the reply's DDP shape from the chain itself (each marker is one
//! write-chunk item, in order, RFC 8166 §3.4.6); [`nfs_proto::ddp::nfs3_reply_hint`] says the same
//! per procedure for a requester provisioning chunks.
//!
//! # Serving over krpc-rdma
//!
//! ```text
//! ResponderEvent::Call(inc) =>
//!     key = drc::CallKey::of(client, &inc.call)          // optional: the reply cache
//!     match cache.begin(&key) {
//!         Replay(r)  => responder.reply(prov, inc.ctx, r),
//!         InProgress => responder.drop_call(prov, inc.ctx, ..),
//!         New => match service.dispatch(&inc.call) {
//!             Ok(d)            => { cache.finish(&key, &d.reply); responder.reply(prov, inc.ctx, d.reply) }
//!             Err(NotACall)    => { cache.abandon(&key); responder.drop_call(prov, inc.ctx, ..) }
//!             Err(Alloc)       => { cache.abandon(&key); /* retry later or drop */ }
//!         },
//!     }
//! ```
//!
//! The chain in is `Incoming::call` as handed up; the chain out goes to `Responder::reply`
//! unchanged: the Responder finds the READ data by its marker and RDMA-Writes it.

//! # RPC-level answers
//!
//! As [`onc_rpc::svc::accept_call`] (RPC_MISMATCH, `AUTH_BADCRED`, `AUTH_TOOWEAK` under
//! [`AuthPolicy::RequireSys`], PROG_UNAVAIL, PROG_MISMATCH 3–3, PROC_UNAVAIL), then
//! GARBAGE_ARGS for arguments that do not decode, a DDP region on a procedure without a
//! DDP-eligible argument or in the wrong place, or a WRITE whose `count` is not its data
//! length; SYSTEM_ERR when the results cannot be encoded (memory, or a backend handing
//! back a handle longer than 64 bytes or a name longer than 255). A message that is not a
//! call is not answered ([`DispatchError::NotACall`]).
//!
//! # NFS-level answers
//!
//! Backend errors become their `NFS3ERR_*` with the failure arm RFC 1813 defines: the
//! dispatcher takes `wcc_data` (attributes before and after, by [`Backend::getattr`]) around
//! SETATTR, WRITE, CREATE, MKDIR, SYMLINK, MKNOD, REMOVE, RMDIR, RENAME, LINK and COMMIT, and
//! post-op attributes for the rest, on success and failure alike.

use alloc::sync::Arc;
use alloc::vec::Vec;

use mbuf::{Chain, PageProvider};

use nfs_proto::chain::{check_data, copy_range, ddp_data, ddp_reply, write_data_iovecs, PageSlice};
use nfs_proto::ddp::{nfs3_ddp_item, Direction};
use nfs_proto::nfs3::*;
use onc_rpc::rpc::AcceptStat;
use onc_rpc::svc::{
    accept_call, header_bytes, refusal, success_encoder, Access, AuthPolicy, Cred, Program,
    Refusal, Squash,
};
use onc_rpc::xdr::{Decoder, Encoder, XdrError};

mod backend;
pub mod dirbudget;
pub mod drc;
mod readdir;

pub use backend::{
    access3_bits, Backend, DirEnd, DirEntry, DirSink, NfsError, NfsResult, ReadData, WriteIov,
    Written,
};
use readdir::Listing;

/// How the service runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Nfs3Config {
    /// Credential policy (default: `AUTH_SYS` and `AUTH_NONE`).
    pub auth: AuthPolicy,
    /// Identity mapping (default: none) of [`Nfs3Service::dispatch`];
    /// [`Nfs3Service::dispatch_as`] takes it per call.
    pub squash: Squash,
    /// Refuse every change with `NFS3ERR_ROFS` (default: no), as `squash`.
    pub read_only: bool,
    /// Largest READ and WRITE data (FSINFO's `rtmax` / `wtmax` are clamped to it; a READ
    /// asks for at most this). Default 1 MiB, Linux's and FreeBSD's maximum.
    pub max_data: u32,
    /// Largest call XDR decoded: the bytes in front of a DDP marker, or a whole call without
    /// one (an inline or Long Call WRITE carries its data in it). Default 1 MiB + 4 KiB.
    pub max_call_xdr: usize,
}

impl Default for Nfs3Config {
    fn default() -> Self {
        Nfs3Config {
            auth: AuthPolicy::AllowNone,
            squash: Squash::None,
            read_only: false,
            max_data: NFS3_MAX_DATA as u32,
            max_call_xdr: NFS3_MAX_DATA + 4096,
        }
    }
}

/// A reply and what it answered (for traces and counters).
#[derive(Debug)]
pub struct Dispatched {
    /// The RPC reply message (with a DDP marker and page mbufs for a READ).
    pub reply: Chain,
    /// The call's xid.
    pub xid: u32,
    /// The procedure, when the call got as far as its procedure.
    pub proc_: Option<u32>,
    /// The NFS status, when the procedure ran.
    pub status: Option<Nfsstat3>,
}

/// Why there is no reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchError {
    /// The message is not an RPC call (or too short to be one): nothing to answer.
    NotACall,
    /// Memory ran out even for a refusal.
    Alloc,
}

/// The NFSv3 program served by [`Nfs3Service`].
pub const fn nfs3_program(auth: AuthPolicy) -> Program {
    Program {
        prog: NFS_PROGRAM,
        low: NFS_V3,
        high: NFS_V3,
        nprocs: NFSPROC3_COMMIT + 1,
        auth,
    }
}

/// Arguments that did not decode, or a DDP layout that does not fit them: GARBAGE_ARGS.
struct Garbage;

impl From<XdrError> for Garbage {
    fn from(_: XdrError) -> Self {
        Garbage
    }
}

/// What a procedure produced: its status, and for READ the data pages.
struct Done {
    status: Nfsstat3,
    data: Option<Chain>,
}

impl From<Nfsstat3> for Done {
    fn from(status: Nfsstat3) -> Self {
        Done { status, data: None }
    }
}

type Proc = Result<Done, Garbage>;

/// The call being served: its chain, the decoded XDR, the DDP item if any.
struct Call<'a> {
    chain: &'a Chain,
    cred: Cred<'a>,
    /// The export is read-only for this caller.
    read_only: bool,
    /// Chain offset and length of the DDP region (at most one: WRITE data, SYMLINK path).
    ddp: Option<(usize, usize)>,
}

impl Call<'_> {
    /// `Ok` unless the export is read-only for the caller: then `NFS3ERR_ROFS`, before the
    /// backend is asked (as knfsd's `nfsd_permission` on an `ro` export).
    fn may_change(&self) -> NfsResult<()> {
        if self.read_only {
            Err(NfsError::RoFs)
        } else {
            Ok(())
        }
    }
}

/// Run `f` in a frame of its own: each procedure's locals stay out of the dispatcher's
/// frame (a kernel stack is 16 KiB; no frame of the kernel module may pass 1 KiB).
#[inline(never)]
fn noinline<R>(f: impl FnOnce() -> R) -> R {
    f()
}

/// The NFSv3 service: decodes calls, runs them on the backend, encodes replies.
pub struct Nfs3Service<B> {
    backend: B,
    pages: Arc<dyn PageProvider>,
    config: Nfs3Config,
}

/// Encode the result of a CREATE, MKDIR, SYMLINK or MKNOD from [`Nfs3Service::dirop`]'s.
macro_rules! put_dirop {
    ($e:expr, $r:expr, $ok:ident, $fail:ident) => {{
        let DirOp { made, dir_wcc } = $r;
        put_with(
            $e,
            made,
            dir_wcc,
            |dir_wcc, (fh, obj_attributes)| $ok {
                obj: Some(fh),
                obj_attributes,
                dir_wcc,
            },
            |dir_wcc| $fail { dir_wcc },
        )
    }};
}

/// What CREATE, MKDIR, SYMLINK and MKNOD did: the new object, and the directory's
/// `wcc_data` either way.
struct DirOp {
    made: NfsResult<(NfsFh3, PostOpAttr)>,
    dir_wcc: WccData,
}

/// Encode a result: `Ok` arm, or the failure arm with the error's status.
fn put<T: Xdr, F: Xdr>(e: &mut Encoder, r: Result<T, (NfsError, F)>) -> Nfsstat3 {
    let r: Nfs3Res<T, F> = match r {
        Ok(v) => Nfs3Res::Ok(v),
        Err((err, resfail)) => Nfs3Res::Fail {
            status: err.status(),
            resfail,
        },
    };
    r.encode(e);
    r.status()
}

/// Encode the result of a backend call whose two arms both carry `shared` (post-op
/// attributes, `wcc_data`): `ok(shared, value)` or `fail(shared)`.
fn put_with<S, V, T: Xdr, F: Xdr>(
    e: &mut Encoder,
    r: NfsResult<V>,
    shared: S,
    ok: impl FnOnce(S, V) -> T,
    fail: impl FnOnce(S) -> F,
) -> Nfsstat3 {
    put(
        e,
        match r {
            Ok(v) => Ok(ok(shared, v)),
            Err(x) => Err((x, fail(shared))),
        },
    )
}

fn wcc_attr(a: &Fattr3) -> WccAttr {
    WccAttr {
        size: a.size,
        mtime: a.mtime,
        ctime: a.ctime,
    }
}

/// The page mbufs of `chain` overlapping `off..off + len` share one provider: it, with the
/// range's page pieces; `None` when the range is not all page data or mixes providers.
fn page_iov(
    chain: &Chain,
    off: usize,
    len: usize,
) -> Option<(Arc<dyn PageProvider>, Vec<PageSlice>)> {
    let end = off.checked_add(len)?;
    let mut provider: Option<&Arc<dyn PageProvider>> = None;
    let mut at = 0usize;
    for m in chain.mbufs() {
        let m_end = at.checked_add(m.len())?;
        if m_end > off && at < end {
            if let Some(p) = m.provider() {
                match provider {
                    None => provider = Some(p),
                    Some(q) if Arc::ptr_eq(p, q) => {}
                    Some(_) => return None,
                }
            }
        }
        at = m_end;
    }
    let slices = write_data_iovecs(chain, off, len).ok()?;
    Some((Arc::clone(provider?), slices))
}

impl<B: Backend> Nfs3Service<B> {
    /// A service over `backend`, producing READ data in pages of `pages` (the transport's
    /// registered page provider).
    pub fn new(backend: B, pages: Arc<dyn PageProvider>, config: Nfs3Config) -> Self {
        Nfs3Service {
            backend,
            pages,
            config,
        }
    }

    /// The backend.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// The configuration.
    pub fn config(&self) -> &Nfs3Config {
        &self.config
    }

    /// The bytes of data the reply to `call` may carry in pages of the service's page
    /// provider: an NFSv3 READ's `count`, clamped as [`Self::dispatch`] clamps it; 0 for any
    /// other call, and for one too short or malformed to tell (dispatch answers those
    /// without data pages). Reads a few words of the call, allocates nothing: a server that
    /// shares its pages fairly between connections has them admitted (e.g. by
    /// `krpc_rdma::transport::Responder::take_reply_pages`) before it dispatches the call.
    pub fn reply_data_bytes(&self, call: &Chain) -> usize {
        let word = |off: usize| -> Option<u32> {
            let mut b = [0u8; 4];
            call.copydata(off, &mut b).ok()?;
            Some(u32::from_be_bytes(b))
        };
        // The offset after an XDR opaque<max> whose length word is at `off`.
        let opaque_end = |off: usize, max: usize| -> Option<usize> {
            let n = usize::try_from(word(off)?).ok().filter(|n| *n <= max)?;
            off.checked_add(4)?
                .checked_add(n.div_ceil(4).checked_mul(4)?)
        };
        let count = || -> Option<u32> {
            let is_read = word(4)? == onc_rpc::rpc::CALL
                && word(8)? == 2
                && word(12)? == NFS_PROGRAM
                && word(16)? == NFS_V3
                && word(20)? == NFSPROC3_READ;
            if !is_read {
                return None;
            }
            // cred and verf: flavor, opaque body<400> (RFC 5531 MAX_AUTH_BYTES).
            let cred = opaque_end(28, onc_rpc::rpc::MAX_AUTH_BYTES)?;
            let verf = opaque_end(cred.checked_add(4)?, onc_rpc::rpc::MAX_AUTH_BYTES)?;
            // READ3args: nfs_fh3 file, offset3 offset, count3 count.
            let fh = opaque_end(verf, NFS3_FHSIZE)?;
            word(fh.checked_add(8)?)
        };
        count().map_or(0, |c| c.min(self.config.max_data) as usize)
    }

    /// Serve one call: `call` is the whole RPC call message; the reply is the whole RPC
    /// reply message. See the module documentation.
    ///
    /// # Errors
    /// [`DispatchError::NotACall`]: not answered; [`DispatchError::Alloc`].
    pub fn dispatch(&self, call: &Chain) -> Result<Dispatched, DispatchError> {
        let access = Access {
            squash: self.config.squash,
            read_only: self.config.read_only,
        };
        self.dispatch_as(call, access)
    }

    /// [`Self::dispatch`] with the export's [`Access`] for the calling client (its squash and
    /// `ro`) instead of the configuration's: a server whose clients get different export
    /// options (matched by their address) shares one service.
    ///
    /// # Errors
    /// As [`Self::dispatch`].
    pub fn dispatch_as(&self, call: &Chain, access: Access) -> Result<Dispatched, DispatchError> {
        let first = call.ddp_regions().next();
        let xdr_len = first
            .map_or(call.len(), |r| r.offset)
            .min(self.config.max_call_xdr);
        let buf = copy_range(call, 0, xdr_len).map_err(|_| DispatchError::Alloc)?;
        let acc = match accept_call(&buf, &nfs3_program(self.config.auth)) {
            Ok(a) => a,
            Err(Refusal::Drop) => return Err(DispatchError::NotACall),
            Err(Refusal::Reply(h)) => {
                let xid = h.xid();
                return Self::header_only(&h, xid, None);
            }
        };
        let xid = acc.header.xid;
        let proc_ = acc.header.proc_;
        let mut d = acc.args;
        let garbage =
            || Self::header_only(&refusal(xid, AcceptStat::GarbageArgs), xid, Some(proc_));
        // At most one DDP region, and only where RFC 8267 allows one in a call.
        let ddp = match ddp_data(call).as_deref() {
            Ok([]) => None,
            Ok([r]) if nfs3_ddp_item(proc_).is_some_and(|i| i.direction == Direction::Call) => {
                Some((r.offset, r.len))
            }
            _ => return garbage(),
        };
        let c = Call {
            chain: call,
            cred: Cred::of(&acc.header).squashed(access.squash),
            read_only: access.read_only,
            ddp,
        };
        let mut e = success_encoder(xid);
        let r = self.run(&c, proc_, &mut d, &mut e);
        let done = match r {
            Ok(done) => done,
            Err(Garbage) => return garbage(),
        };
        let system_err =
            || Self::header_only(&refusal(xid, AcceptStat::SystemErr), xid, Some(proc_));
        let Ok(head) = e.finish() else {
            return system_err();
        };
        let reply = match done.data {
            Some(data) if !data.is_empty() => ddp_reply(&head, data, &[]),
            _ => Chain::from_bytes(&head).map_err(Into::into),
        };
        match reply {
            Ok(reply) => Ok(Dispatched {
                reply,
                xid,
                proc_: Some(proc_),
                status: Some(done.status),
            }),
            Err(_) => system_err(),
        }
    }

    fn header_only(
        h: &onc_rpc::rpc::ReplyHeader,
        xid: u32,
        proc_: Option<u32>,
    ) -> Result<Dispatched, DispatchError> {
        let b = header_bytes(h).map_err(|_| DispatchError::Alloc)?;
        let reply = Chain::from_bytes(&b).map_err(|_| DispatchError::Alloc)?;
        Ok(Dispatched {
            reply,
            xid,
            proc_,
            status: None,
        })
    }

    fn run(&self, c: &Call<'_>, proc_: u32, d: &mut Decoder<'_>, e: &mut Encoder) -> Proc {
        let cr = &c.cred;
        let b = &self.backend;
        let status = match proc_ {
            NFSPROC3_NULL => Nfsstat3::OK,
            NFSPROC3_GETATTR => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let a = GetattrArgs::decode(d)?;
                    let r = b.getattr(cr, &a.object);
                    put_with(
                        e,
                        r,
                        (),
                        |(), obj_attributes| GetattrResOk { obj_attributes },
                        |()| (),
                    )
                })
            })?,
            NFSPROC3_SETATTR => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let a = SetattrArgs::decode(d)?;
                    let before = self.pre(cr, &a.object);
                    let r = c
                        .may_change()
                        .and_then(|()| b.setattr(cr, &a.object, &a.new_attributes, a.guard));
                    let wcc = self.wcc(cr, &a.object, before);
                    put_with(
                        e,
                        r,
                        wcc,
                        |obj_wcc, ()| SetattrResOk { obj_wcc },
                        |obj_wcc| SetattrResFail { obj_wcc },
                    )
                })
            })?,
            NFSPROC3_LOOKUP => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let a = LookupArgs::decode(d)?;
                    let dir = &a.what.dir;
                    let r = b.lookup(cr, dir, &a.what.name.0);
                    let r = r.map(|object| (self.post(cr, &object), object));
                    put_with(
                        e,
                        r,
                        self.post(cr, dir),
                        |dir_attributes, (obj_attributes, object)| LookupResOk {
                            object,
                            obj_attributes,
                            dir_attributes,
                        },
                        |dir_attributes| LookupResFail { dir_attributes },
                    )
                })
            })?,
            NFSPROC3_ACCESS => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let a = AccessArgs::decode(d)?;
                    // A read-only export grants nothing that changes the file system.
                    let ro_mask = if c.read_only {
                        !(ACCESS3_MODIFY | ACCESS3_EXTEND | ACCESS3_DELETE)
                    } else {
                        u32::MAX
                    };
                    let r = b.access(cr, &a.object, a.access & ro_mask);
                    put_with(
                        e,
                        r,
                        self.post(cr, &a.object),
                        |obj_attributes, access| AccessResOk {
                            obj_attributes,
                            access: access & a.access & ro_mask,
                        },
                        |obj_attributes| AccessResFail { obj_attributes },
                    )
                })
            })?,
            NFSPROC3_READLINK => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let a = ReadlinkArgs::decode(d)?;
                    let r = b.readlink(cr, &a.symlink);
                    put_with(
                        e,
                        r,
                        self.post(cr, &a.symlink),
                        |symlink_attributes, data| ReadlinkResOk {
                            symlink_attributes,
                            data,
                        },
                        |symlink_attributes| ReadlinkResFail { symlink_attributes },
                    )
                })
            })?,
            NFSPROC3_READ => return Ok(self.read(cr, &ReadArgs::decode(d)?, e)),
            NFSPROC3_WRITE => self.write(c, d, e)?,
            NFSPROC3_CREATE => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let a = CreateArgs::decode(d)?;
                    let w = &a.where_;
                    let r = self.dirop(cr, &w.dir, || {
                        c.may_change()?;
                        b.create(cr, &w.dir, &w.name.0, &a.how)
                    });
                    put_dirop!(e, r, CreateResOk, CreateResFail)
                })
            })?,
            NFSPROC3_MKDIR => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let a = MkdirArgs::decode(d)?;
                    let w = &a.where_;
                    let r = self.dirop(cr, &w.dir, || {
                        c.may_change()?;
                        b.mkdir(cr, &w.dir, &w.name.0, &a.attributes)
                    });
                    put_dirop!(e, r, MkdirResOk, MkdirResFail)
                })
            })?,
            NFSPROC3_SYMLINK => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let (h, len) = SymlinkArgs::decode_head(d)?;
                    let target = self.item(c, d, len)?;
                    let w = &h.where_;
                    let r = self.dirop(cr, &w.dir, || {
                        c.may_change()?;
                        b.symlink(cr, &w.dir, &w.name.0, &h.symlink_attributes, &target)
                    });
                    put_dirop!(e, r, SymlinkResOk, SymlinkResFail)
                })
            })?,
            NFSPROC3_MKNOD => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let a = MknodArgs::decode(d)?;
                    let w = &a.where_;
                    let r = self.dirop(cr, &w.dir, || {
                        c.may_change()?;
                        b.mknod(cr, &w.dir, &w.name.0, &a.what)
                    });
                    put_dirop!(e, r, MknodResOk, MknodResFail)
                })
            })?,
            NFSPROC3_REMOVE | NFSPROC3_RMDIR => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let o = Diropargs3::decode(d)?;
                    let before = self.pre(cr, &o.dir);
                    let r = if let Err(ro) = c.may_change() {
                        Err(ro)
                    } else if proc_ == NFSPROC3_REMOVE {
                        b.remove(cr, &o.dir, &o.name.0)
                    } else {
                        b.rmdir(cr, &o.dir, &o.name.0)
                    };
                    // REMOVE3res and RMDIR3res have the same XDR.
                    put_with(
                        e,
                        r,
                        self.wcc(cr, &o.dir, before),
                        |dir_wcc, ()| RemoveResOk { dir_wcc },
                        |dir_wcc| RemoveResFail { dir_wcc },
                    )
                })
            })?,
            NFSPROC3_RENAME => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let a = RenameArgs::decode(d)?;
                    let (f, t) = (&a.from, &a.to);
                    let (fb, tb) = (self.pre(cr, &f.dir), self.pre(cr, &t.dir));
                    let r = c
                        .may_change()
                        .and_then(|()| b.rename(cr, &f.dir, &f.name.0, &t.dir, &t.name.0));
                    put_with(
                        e,
                        r,
                        (self.wcc(cr, &f.dir, fb), self.wcc(cr, &t.dir, tb)),
                        |(fromdir_wcc, todir_wcc), ()| RenameResOk {
                            fromdir_wcc,
                            todir_wcc,
                        },
                        |(fromdir_wcc, todir_wcc)| RenameResFail {
                            fromdir_wcc,
                            todir_wcc,
                        },
                    )
                })
            })?,
            NFSPROC3_LINK => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let a = LinkArgs::decode(d)?;
                    let before = self.pre(cr, &a.link.dir);
                    let r = c
                        .may_change()
                        .and_then(|()| b.link(cr, &a.file, &a.link.dir, &a.link.name.0));
                    put_with(
                        e,
                        r,
                        (self.post(cr, &a.file), self.wcc(cr, &a.link.dir, before)),
                        |(file_attributes, linkdir_wcc), ()| LinkResOk {
                            file_attributes,
                            linkdir_wcc,
                        },
                        |(file_attributes, linkdir_wcc)| LinkResFail {
                            file_attributes,
                            linkdir_wcc,
                        },
                    )
                })
            })?,
            NFSPROC3_READDIR => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let a = ReaddirArgs::decode(d)?;
                    let l = Listing {
                        dir: &a.dir,
                        cookie: a.cookie,
                        verf: a.cookieverf,
                        dircount: None,
                        maxcount: a.count,
                    };
                    readdir::readdir(b, cr, &l, self.post(cr, &a.dir), e)
                })
            })?,
            NFSPROC3_READDIRPLUS => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let a = ReaddirplusArgs::decode(d)?;
                    let l = Listing {
                        dir: &a.dir,
                        cookie: a.cookie,
                        verf: a.cookieverf,
                        dircount: Some(a.dircount),
                        maxcount: a.maxcount,
                    };
                    readdir::readdir(b, cr, &l, self.post(cr, &a.dir), e)
                })
            })?,
            NFSPROC3_FSSTAT => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let a = FsstatArgs::decode(d)?;
                    let r = b.fsstat(cr, &a.fsroot);
                    put_with(
                        e,
                        r,
                        self.post(cr, &a.fsroot),
                        |obj_attributes, ok| FsstatResOk {
                            obj_attributes,
                            ..ok
                        },
                        |obj_attributes| FsstatResFail { obj_attributes },
                    )
                })
            })?,
            NFSPROC3_FSINFO => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let a = FsinfoArgs::decode(d)?;
                    let r = b.fsinfo(cr, &a.fsroot);
                    let m = self.config.max_data;
                    put_with(
                        e,
                        r,
                        self.post(cr, &a.fsroot),
                        |obj_attributes, ok| FsinfoResOk {
                            obj_attributes,
                            rtmax: ok.rtmax.min(m),
                            rtpref: ok.rtpref.min(m),
                            wtmax: ok.wtmax.min(m),
                            wtpref: ok.wtpref.min(m),
                            ..ok
                        },
                        |obj_attributes| FsinfoResFail { obj_attributes },
                    )
                })
            })?,
            NFSPROC3_PATHCONF => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let a = PathconfArgs::decode(d)?;
                    let r = b.pathconf(cr, &a.object);
                    put_with(
                        e,
                        r,
                        self.post(cr, &a.object),
                        |obj_attributes, ok| PathconfResOk {
                            obj_attributes,
                            ..ok
                        },
                        |obj_attributes| PathconfResFail { obj_attributes },
                    )
                })
            })?,
            NFSPROC3_COMMIT => noinline(|| -> Result<Nfsstat3, Garbage> {
                Ok({
                    let a = CommitArgs::decode(d)?;
                    let before = self.pre(cr, &a.file);
                    let r = b.commit(cr, &a.file, a.offset, a.count);
                    put_with(
                        e,
                        r,
                        self.wcc(cr, &a.file, before),
                        |file_wcc, verf| CommitResOk { file_wcc, verf },
                        |file_wcc| CommitResFail { file_wcc },
                    )
                })
            })?,
            // accept_call refused every other number with PROC_UNAVAIL.
            _ => return Err(Garbage),
        };
        Ok(status.into())
    }

    /// Post-op attributes (none when the backend cannot give them).
    fn post(&self, cr: &Cred<'_>, fh: &NfsFh3) -> PostOpAttr {
        self.backend.getattr(cr, fh).ok()
    }

    /// Pre-op attributes for `wcc_data`.
    fn pre(&self, cr: &Cred<'_>, fh: &NfsFh3) -> PreOpAttr {
        self.backend.getattr(cr, fh).ok().as_ref().map(wcc_attr)
    }

    fn wcc(&self, cr: &Cred<'_>, fh: &NfsFh3, before: PreOpAttr) -> WccData {
        WccData {
            before,
            after: self.post(cr, fh),
        }
    }

    /// Run a directory-creating operation with the directory's `wcc_data` around it; on
    /// success the new object's handle and attributes.
    fn dirop(&self, cr: &Cred<'_>, dir: &NfsFh3, op: impl FnOnce() -> NfsResult<NfsFh3>) -> DirOp {
        let before = self.pre(cr, dir);
        let r = op();
        let dir_wcc = self.wcc(cr, dir, before);
        DirOp {
            made: r.map(|fh| {
                let attr = self.post(cr, &fh);
                (fh, attr)
            }),
            dir_wcc,
        }
    }

    /// A DDP-eligible argument item of `len` bytes at the decoder's position: in the call's
    /// DDP region (which must start right there) or inline. Copied (a SYMLINK path).
    fn item(&self, c: &Call<'_>, d: &mut Decoder<'_>, len: u32) -> Result<Vec<u8>, Garbage> {
        let len = len as usize;
        match c.ddp {
            Some((off, rlen)) if off == d.pos() && rlen == len => {
                copy_range(c.chain, off, len).map_err(|_| Garbage)
            }
            Some(_) => Err(Garbage),
            None => {
                let b = d.opaque_fixed(len)?;
                let mut v = Vec::new();
                v.try_reserve_exact(b.len()).map_err(|_| Garbage)?;
                v.extend_from_slice(b);
                Ok(v)
            }
        }
    }

    fn read(&self, cr: &Cred<'_>, a: &ReadArgs, e: &mut Encoder) -> Done {
        let count = a.count.min(self.config.max_data);
        let r = self
            .backend
            .read(cr, &a.file, a.offset, count, &self.pages)
            .and_then(|rd| {
                let ok = rd.data.len() <= count as usize && check_data(&rd.data).is_ok();
                if ok {
                    Ok(rd)
                } else {
                    Err(NfsError::ServerFault)
                }
            });
        let file_attributes = self.post(cr, &a.file);
        match r {
            Ok(rd) => {
                // Bounded by `count` above.
                let n = rd.data.len() as u32;
                ReadHead {
                    status: Nfsstat3::OK,
                    file_attributes,
                    count: n,
                    eof: rd.eof,
                    data_len: n,
                }
                .encode(e);
                Done {
                    status: Nfsstat3::OK,
                    data: Some(rd.data),
                }
            }
            Err(x) => {
                ReadHead {
                    status: x.status(),
                    file_attributes,
                    count: 0,
                    eof: false,
                    data_len: 0,
                }
                .encode(e);
                x.status().into()
            }
        }
    }

    fn write(
        &self,
        c: &Call<'_>,
        d: &mut Decoder<'_>,
        e: &mut Encoder,
    ) -> Result<Nfsstat3, Garbage> {
        let cr = &c.cred;
        let (h, len) = WriteArgs::decode_head(d)?;
        if h.count != len {
            return Err(Garbage);
        }
        let n = len as usize;
        let at = d.pos();
        // Where the data is: the DDP region right here, or inline in the decoded XDR (an
        // inline call, or a Long Call whose pages hold everything).
        let (pages, inline) = match c.ddp {
            Some((off, rlen)) if off == at && rlen == n => (page_iov(c.chain, off, n), None),
            Some(_) => return Err(Garbage),
            None => {
                let b = d.opaque_fixed(n)?;
                (page_iov(c.chain, at, n), Some(b))
            }
        };
        let copied;
        let iov = match (&pages, inline) {
            (Some((provider, slices)), _) => WriteIov::Pages { provider, slices },
            (None, Some(b)) => WriteIov::Bytes(b),
            // A DDP region whose pages come from several providers: one copy.
            (None, None) => {
                copied = copy_range(c.chain, at, n).map_err(|_| Garbage)?;
                WriteIov::Bytes(&copied)
            }
        };
        let before = self.pre(cr, &h.file);
        let r = match h.offset.checked_add(u64::from(len)) {
            Some(_) => c
                .may_change()
                .and_then(|()| self.backend.write(cr, &h.file, h.offset, h.stable, iov)),
            None => Err(NfsError::FBig),
        };
        // A backend that claims more bytes than it was given, or less durability than the
        // call asked for (the client would drop data it believes committed), is at fault.
        let r = r.and_then(|w| {
            if w.count <= len && w.committed as u32 >= h.stable as u32 {
                Ok(w)
            } else {
                Err(NfsError::ServerFault)
            }
        });
        Ok(put_with(
            e,
            r,
            self.wcc(cr, &h.file, before),
            |file_wcc, w| WriteResOk {
                file_wcc,
                count: w.count,
                committed: w.committed,
                verf: w.verf,
            },
            |file_wcc| WriteResFail { file_wcc },
        ))
    }
}
