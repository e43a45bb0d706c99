//! READDIR (RFC 8881 section 18.23): a directory's entries with the attributes asked for,
//! from a cookie on.

use alloc::vec::Vec;

use onc_rpc::xdr::{Decoder, Encoder, XdrError};

use super::{try_push, Bitmap4, Component4, Fattr4, Res4, Verifier4, Xdr};

/// Most entries one READDIR result may carry (a result larger than the client's `maxcount`
/// is the server's fault anyway; an entry is at least 24 bytes, so 1 MiB holds fewer).
pub const NFS4_MAX_DIR_ENTRIES: usize = 1 << 16;

xdr4_struct! {
    /// `READDIR4args`.
    #[derive(Hash)]
    pub struct Readdir4Args {
        /// `cookie`: 0 for the start, else the last entry's cookie of the previous call.
        pub cookie: u64,
        /// `cookieverf`: zeros for the start, else the previous result's.
        pub cookieverf: Verifier4,
        /// `dircount`: a hint of the bytes of names and cookies wanted.
        pub dircount: u32,
        /// `maxcount`: the most bytes of the whole result.
        pub maxcount: u32,
        /// `attr_request`.
        pub attr_request: Bitmap4,
    }
}

xdr4_struct! {
    /// `entry4` without its `nextentry` link (the entries are a vector in
    /// [`Readdir4ResOk`]).
    #[derive(Hash)]
    pub struct Entry4 {
        /// `cookie`.
        pub cookie: u64,
        /// `name`.
        pub name: Component4,
        /// `attrs`.
        pub attrs: Fattr4,
    }
}

/// `READDIR4resok`: the cookie verifier and `dirlist4` (the linked `entry4` list as a
/// vector, at most [`NFS4_MAX_DIR_ENTRIES`], and `eof`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Readdir4ResOk {
    /// `cookieverf`.
    pub cookieverf: Verifier4,
    /// `reply.entries`.
    pub entries: Vec<Entry4>,
    /// `reply.eof`.
    pub eof: bool,
}

/// More than [`NFS4_MAX_DIR_ENTRIES`] entries mark the encoder failed.
impl Xdr for Readdir4ResOk {
    fn encode(&self, e: &mut Encoder) {
        self.cookieverf.encode(e);
        if self.entries.len() > NFS4_MAX_DIR_ENTRIES {
            e.fail();
            return;
        }
        for entry in &self.entries {
            e.u32(1);
            entry.encode(e);
        }
        e.u32(0);
        e.u32(u32::from(self.eof));
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        let cookieverf = Verifier4::decode(d)?;
        let mut entries = Vec::new();
        while d.bool()? {
            if entries.len() >= NFS4_MAX_DIR_ENTRIES {
                return Err(XdrError::TooManyEntries {
                    what: "dirlist4 entries",
                    max: NFS4_MAX_DIR_ENTRIES,
                });
            }
            try_push(&mut entries, Entry4::decode(d)?)?;
        }
        Ok(Readdir4ResOk {
            cookieverf,
            entries,
            eof: d.bool()?,
        })
    }
}

inherent_xdr4!(Readdir4ResOk);

/// `READDIR4res`.
pub type Readdir4Res = Res4<Readdir4ResOk>;
