//! READDIR and READDIRPLUS (RFC 1813 sections 3.3.16 and 3.3.17): the backend streams
//! entries into a [`DirSink`] that encodes each one straight into the reply's XDR while the
//! [`DirBudget`] says it fits, so a listing of any size needs neither a list of entries nor an
//! allocation per entry, and a reply never exceeds `count` / `maxcount`.

use super::backend::{Backend, DirEntry, DirSink, NfsError};
use super::dirbudget::{dir_info_len, plus_entry_len, DirBudget};
use nfs_proto::nfs3::{
    Cookieverf3, NfsFh3, Nfsstat3, PostOpAttr, Xdr, NFS3_FHSIZE, NFS3_MAXNAMLEN,
};
use onc_rpc::svc::Cred;
use onc_rpc::xdr::Encoder;

/// What a READDIR (no `dircount`) or READDIRPLUS asks for.
pub(super) struct Listing<'a> {
    pub dir: &'a NfsFh3,
    pub cookie: u64,
    pub verf: Cookieverf3,
    /// READDIRPLUS's `dircount`; `None` for READDIR.
    pub dircount: Option<u32>,
    /// READDIR's `count` or READDIRPLUS's `maxcount`.
    pub maxcount: u32,
}

/// The entries of a READDIR(PLUS) reply, encoded as the backend streams them.
struct Entries<'a> {
    e: &'a mut Encoder,
    budget: DirBudget,
    plus: bool,
    /// An entry was refused: the reply is full.
    full: bool,
    /// The backend offered an entry that cannot be encoded.
    bad: bool,
}

impl DirSink for Entries<'_> {
    fn wants_plus(&self) -> bool {
        self.plus
    }

    fn entry(&mut self, x: &DirEntry<'_>) -> bool {
        if self.full || self.bad {
            return false;
        }
        if x.name.len() > NFS3_MAXNAMLEN || x.fh.is_some_and(|f| f.len() > NFS3_FHSIZE) {
            self.bad = true;
            return false;
        }
        let dir_len = dir_info_len(x.name.len());
        let (attr, fh) = if self.plus {
            (x.attr, x.fh)
        } else {
            (None, None)
        };
        let len = if self.plus {
            plus_entry_len(x.name.len(), attr.is_some(), fh.map(<[u8]>::len))
        } else {
            dir_len
        };
        if !self.budget.try_take(len, dir_len) {
            self.full = true;
            return false;
        }
        let e = &mut *self.e;
        e.bool(true);
        e.u64(x.fileid);
        e.opaque(x.name);
        e.u64(x.cookie);
        if self.plus {
            match attr {
                Some(a) => {
                    e.bool(true);
                    a.encode(e);
                }
                None => e.bool(false),
            }
            match fh {
                Some(f) => {
                    e.bool(true);
                    e.opaque(f);
                }
                None => e.bool(false),
            }
        }
        true
    }
}

/// Run the listing on `b` and encode `READDIR3res` / `READDIRPLUS3res` (same layout up to
/// the entries) into `e`: `NFS3ERR_TOOSMALL` when not one entry fits (or not even the reply
/// without entries), `NFS3ERR_SERVERFAULT` for an entry that cannot be encoded.
pub(super) fn readdir<B: Backend + ?Sized>(
    b: &B,
    cr: &Cred<'_>,
    l: &Listing<'_>,
    dir_attributes: PostOpAttr,
    e: &mut Encoder,
) -> Nfsstat3 {
    let fail = |e: &mut Encoder, x: NfsError, dir_attributes: PostOpAttr| {
        x.status().encode(e);
        dir_attributes.encode(e);
        x.status()
    };
    let has_attr = dir_attributes.is_some();
    let budget = match l.dircount {
        None => DirBudget::readdir(l.maxcount, has_attr),
        Some(dc) => DirBudget::readdirplus(dc, l.maxcount, has_attr),
    };
    if !budget.fixed_fits() {
        return fail(e, NfsError::TooSmall, dir_attributes);
    }
    // Room for what the client allows (up to 64 KiB; larger listings grow the buffer).
    let mut ents = Encoder::with_capacity((l.maxcount as usize).min(1 << 16));
    let mut sink = Entries {
        e: &mut ents,
        budget,
        plus: l.dircount.is_some(),
        full: false,
        bad: false,
    };
    let r = b.readdir(cr, l.dir, l.cookie, l.verf, &mut sink);
    let (n, full, bad) = (sink.budget.entries(), sink.full, sink.bad);
    let end = match r {
        Ok(_) if bad => return fail(e, NfsError::ServerFault, dir_attributes),
        Ok(_) if n == 0 && full => return fail(e, NfsError::TooSmall, dir_attributes),
        Ok(end) => end,
        Err(x) => return fail(e, x, dir_attributes),
    };
    let Ok(ents) = ents.finish() else {
        return fail(e, NfsError::ServerFault, dir_attributes);
    };
    Nfsstat3::OK.encode(e);
    dir_attributes.encode(e);
    end.verf.encode(e);
    e.raw(&ents);
    e.bool(false);
    e.bool(end.eof && !full);
    Nfsstat3::OK
}
