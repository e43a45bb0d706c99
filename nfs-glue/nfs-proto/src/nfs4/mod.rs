//! NFS version 4.1 XDR (RFC 8881; the XDR of RFC 5662, the types shared with 4.0 from RFC
//! 7530 / 7531) for a minimal client and its callback service: the NULL and COMPOUND
//! procedures with the operations a client needs to set up a session and do I/O, and the
//! callback program's CB_NULL and CB_COMPOUND with CB_SEQUENCE and CB_RECALL.
//!
//! Every type implements this module's [`Xdr`] (and has inherent `encode` / `decode` /
//! `to_bytes` doing the same), in both directions: a client encodes arguments and decodes
//! results, its callback service decodes callback arguments and encodes callback results,
//! and the tests do all four.
//!
//! # Operations
//!
//! COMPOUND ([`Compound4Args`] / [`Compound4Res`], one [`NfsArgop4`] / [`NfsResop4`] per
//! operation): EXCHANGE_ID, CREATE_SESSION, SEQUENCE, RECLAIM_COMPLETE, DESTROY_SESSION,
//! DESTROY_CLIENTID, PUTROOTFH, PUTFH, GETFH, LOOKUP, GETATTR, OPEN, CLOSE, DELEGRETURN,
//! READ, WRITE, and ILLEGAL. Any other operation number — one RFC 8881 defines but this
//! codec does not implement, or one nobody defines — is [`XdrError::BadEnum`] (never a
//! panic): its arguments' length is unknown, so the rest of the message cannot be read.
//! CB_COMPOUND ([`CbCompound4Args`] / [`CbCompound4Res`]): CB_SEQUENCE, CB_RECALL and
//! CB_ILLEGAL, likewise.
//!
//! # Bounds
//!
//! Decoders return [`XdrError`] on malformed input and never panic. Every length or count a
//! peer sends is bounded before anything is allocated, and every buffer is allocated
//! fallibly ([`XdrError::Alloc`]):
//!
//! * the RFC's own bounds: [`NFS4_FHSIZE`] (file handles), [`NFS4_OPAQUE_LIMIT`]
//!   (`co_ownerid`, state owners, `so_major_id`, `eir_server_scope`), `ca_rdma_ird<1>`,
//!   `eia_client_impl_id<1>`, `AUTH_SYS` machine names (255) and groups (16);
//! * ours, for what RFC 5662 leaves unbounded: [`NFS4_MAX_OPS`] operations in a COMPOUND
//!   or CB_COMPOUND, [`NFS4_MAX_BITMAP_WORDS`] words of a `bitmap4`, [`NFS4_MAX_ATTRLIST`]
//!   bytes of an `attrlist4`, [`NFS4_MAXNAMLEN`] bytes of a `component4`,
//!   [`NFS4_MAX_UTF8`] bytes of the other strings (tags, owners, ACE `who`, implementation
//!   ids), [`NFS4_MAX_SEC_PARMS`] callback security parameters, [`NFS4_MAX_REFERRING_LISTS`]
//!   and [`NFS4_MAX_REFERRING_CALLS`] in CB_SEQUENCE, and the READ / WRITE data by a
//!   caller-given maximum ([`NFS4_MAX_DATA`] through [`Xdr::decode`]).
//!
//! Encoders never panic: a value that cannot be encoded (a handle longer than
//! [`NFS4_FHSIZE`], a failure result carrying `NFS4_OK`, more operations than
//! [`NFS4_MAX_OPS`], …) marks the [`Encoder`] failed, and [`Encoder::finish`] reports it.
//! So whatever decodes re-encodes to the same value.
//!
//! Strings (`utf8str_cs`, `utf8str_mixed`, `component4`) are kept as bytes: whether they
//! are valid UTF-8 is the server's business (`NFS4ERR_INVAL`, `NFS4ERR_BADCHAR`).
//!
//! # Attributes
//!
//! [`Fattr4`] is the raw `bitmap4` + `attrlist4`. [`Attrs4`] is a small typed set (type,
//! change, size, fileid, mode, numlinks, owner, owner_group, time_modify) converted to and
//! from the raw form; an attribute outside the set is refused, see [`Attrs4::from_fattr4`].
//!
//! # Direct data placement (RFC 8267)
//!
//! WRITE's argument data and READ's result data are NFSv4's DDP-eligible file data
//! ([`crate::ddp::NFS4_DDP`]). [`WriteDdpCompound`] encodes a COMPOUND around a WRITE whose
//! data travel in a read chunk, as the `[XDR][DDP marker][pages][pad][XDR]` chain of
//! [`crate::chain::ddp_call`]; [`locate_read_data`] is the requester's `LocateFn` for a
//! COMPOUND reply holding a READ result, and [`locate_write_data`] finds the WRITE data of a
//! received COMPOUND call.

use alloc::vec::Vec;

use onc_rpc::xdr::{Decoder, Encoder, XdrError};

/// Define a struct whose XDR is its fields in order, with the [`Xdr`] impl and inherent
/// `encode` / `decode` / `to_bytes`.
macro_rules! xdr4_struct {
    (
        $(#[$m:meta])*
        pub struct $name:ident {
            $( $(#[$fm:meta])* pub $f:ident : $t:ty, )*
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub struct $name {
            $( $(#[$fm])* pub $f: $t, )*
        }

        impl $crate::nfs4::Xdr for $name {
            fn encode(&self, e: &mut ::onc_rpc::xdr::Encoder) {
                $( $crate::nfs4::Xdr::encode(&self.$f, e); )*
            }
            fn decode(
                d: &mut ::onc_rpc::xdr::Decoder<'_>,
            ) -> Result<Self, ::onc_rpc::xdr::XdrError> {
                Ok($name {
                    $( $f: $crate::nfs4::Xdr::decode(d)?, )*
                })
            }
        }

        inherent_xdr4!($name);
    };
}

/// Inherent `encode` / `decode` / `to_bytes` forwarding to the [`Xdr`] impl.
macro_rules! inherent_xdr4 {
    ($($name:ty),* $(,)?) => {
        $(
            impl $name {
                /// Append the XDR encoding to `e` (see [`Xdr::encode`](crate::nfs4::Xdr)).
                pub fn encode(&self, e: &mut ::onc_rpc::xdr::Encoder) {
                    <Self as $crate::nfs4::Xdr>::encode(self, e)
                }

                /// Decode from `d` (see [`Xdr::decode`](crate::nfs4::Xdr)).
                ///
                /// # Errors
                /// Malformed or truncated input, or a length or count above its bound.
                pub fn decode(
                    d: &mut ::onc_rpc::xdr::Decoder<'_>,
                ) -> Result<Self, ::onc_rpc::xdr::XdrError> {
                    <Self as $crate::nfs4::Xdr>::decode(d)
                }

                /// The XDR encoding as bytes.
                ///
                /// # Errors
                /// [`XdrError::Alloc`](::onc_rpc::xdr::XdrError) when the value cannot be
                /// encoded.
                pub fn to_bytes(&self) -> Result<alloc::vec::Vec<u8>, ::onc_rpc::xdr::XdrError> {
                    <Self as $crate::nfs4::Xdr>::to_bytes(self)
                }
            }
        )*
    };
}

/// Generate a C-like XDR enumeration: values outside it are [`XdrError::BadEnum`].
macro_rules! xdr4_enum {
    (
        $(#[$m:meta])*
        pub enum $name:ident ($what:literal) {
            $( $(#[$vm:meta])* $v:ident = $n:literal, )*
        }
    ) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u32)]
        pub enum $name {
            $( $(#[$vm])* $v = $n, )*
        }

        impl $name {
            /// The value for discriminant `v`, if any.
            pub fn from_u32(v: u32) -> Option<Self> {
                match v {
                    $( $n => Some($name::$v), )*
                    _ => None,
                }
            }
        }

        impl $crate::nfs4::Xdr for $name {
            fn encode(&self, e: &mut ::onc_rpc::xdr::Encoder) {
                e.u32(*self as u32);
            }
            fn decode(
                d: &mut ::onc_rpc::xdr::Decoder<'_>,
            ) -> Result<Self, ::onc_rpc::xdr::XdrError> {
                let value = d.u32()?;
                $name::from_u32(value)
                    .ok_or(::onc_rpc::xdr::XdrError::BadEnum { what: $what, value })
            }
        }

        inherent_xdr4!($name);
    };
}

/// Generate a variable-length opaque (or string) newtype bounded by `$max` bytes.
macro_rules! bounded_opaque {
    ($(#[$m:meta])* $name:ident, $what:literal, $max:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
        pub struct $name(pub alloc::vec::Vec<u8>);

        impl $name {
            /// A copy of `b` (not checked against the bound here: encoding a longer one
            /// marks the encoder failed).
            pub fn new(b: &[u8]) -> Self {
                $name(b.to_vec())
            }

            /// The bytes.
            pub fn as_bytes(&self) -> &[u8] {
                &self.0
            }
        }

        impl $crate::nfs4::Xdr for $name {
            fn encode(&self, e: &mut ::onc_rpc::xdr::Encoder) {
                $crate::nfs4::put_bounded(e, &self.0, $max);
            }
            fn decode(
                d: &mut ::onc_rpc::xdr::Decoder<'_>,
            ) -> Result<Self, ::onc_rpc::xdr::XdrError> {
                Ok($name($crate::nfs4::to_vec(d.opaque($what, $max)?)?))
            }
        }

        inherent_xdr4!($name);
    };
}

mod attr;
mod callback;
mod compound;
mod ddp;
mod dir;
mod fh;
mod io;
mod open;
mod session;
mod types;

pub use attr::*;
pub use callback::*;
pub use compound::*;
pub use ddp::*;
pub use dir::*;
pub use fh::*;
pub use io::*;
pub use open::*;
pub use session::*;
pub use types::*;

/// The NFS program number (the same program as NFSv3's).
pub const NFS4_PROGRAM: u32 = crate::ddp::NFS_PROGRAM;
/// The NFS version this module speaks.
pub const NFS_V4: u32 = 4;
/// The minor version this module speaks (`minorversion` of COMPOUND and CB_COMPOUND).
pub const NFS4_MINOR_VERSION: u32 = 1;
/// Procedure 0: `NFSPROC4_NULL` (void arguments, void results).
pub const NFSPROC4_NULL: u32 = 0;
/// Procedure 1: `NFSPROC4_COMPOUND`.
pub const NFSPROC4_COMPOUND: u32 = 1;

/// The callback program's version (its program number is the client's choice,
/// CREATE_SESSION's `csa_cb_program`).
pub const NFS4_CALLBACK_VERSION: u32 = 1;
/// Callback procedure 0: `CB_NULL` (void arguments, void results).
pub const CB_NULL: u32 = 0;
/// Callback procedure 1: `CB_COMPOUND`.
pub const CB_COMPOUND: u32 = 1;

/// `NFS4_FHSIZE`: the largest file handle, in bytes.
pub const NFS4_FHSIZE: usize = 128;
/// `NFS4_VERIFIER_SIZE`: bytes of a `verifier4`.
pub const NFS4_VERIFIER_SIZE: usize = 8;
/// `NFS4_OTHER_SIZE`: bytes of a stateid's `other` field.
pub const NFS4_OTHER_SIZE: usize = 12;
/// `NFS4_SESSIONID_SIZE`: bytes of a `sessionid4`.
pub const NFS4_SESSIONID_SIZE: usize = 16;
/// `NFS4_OPAQUE_LIMIT`: the bound RFC 5662 puts on client and server owners and scopes.
pub const NFS4_OPAQUE_LIMIT: usize = 1024;
/// Largest `component4` (a name in a directory) accepted or produced: RFC 5662 leaves it
/// unbounded; 255 is `NAME_MAX` on FreeBSD and Linux.
pub const NFS4_MAXNAMLEN: usize = 255;
/// Largest other UTF-8 string (a COMPOUND tag, an owner or group, an ACE's `who`, an
/// implementation id's domain or name) accepted or produced: RFC 5662 leaves them
/// unbounded; we reuse [`NFS4_OPAQUE_LIMIT`] (Linux's server takes tags of at most 128
/// bytes and names of at most 128 for owners).
pub const NFS4_MAX_UTF8: usize = NFS4_OPAQUE_LIMIT;
/// Largest number of operations in a COMPOUND or CB_COMPOUND accepted or produced (a
/// longer array is [`XdrError::TooManyEntries`]). RFC 5662 leaves `argarray<>` unbounded;
/// sessions negotiate `ca_maxoperations`, which Linux's server sets to 50 and clients use
/// far fewer; 128 leaves room.
pub const NFS4_MAX_OPS: usize = 128;
/// Largest `bitmap4` accepted or produced, in 32-bit words: RFC 8881 and RFC 7862 define
/// attributes up to number 82 (three words); eight leave room for extensions.
pub const NFS4_MAX_BITMAP_WORDS: usize = 8;
/// Largest `attrlist4` (the encoded attribute values of a `fattr4`) accepted or produced:
/// 64 KiB. Our typed set ([`Attrs4`]) needs a few hundred bytes; a large ACL would not fit,
/// and is not requested by this client.
pub const NFS4_MAX_ATTRLIST: usize = 64 * 1024;
/// Largest number of `callback_sec_parms4` in CREATE_SESSION (RFC 5662: unbounded; clients
/// send one or two).
pub const NFS4_MAX_SEC_PARMS: usize = 16;
/// Largest number of `referring_call_list4` in a CB_SEQUENCE (one per session of the
/// client; RFC 5662: unbounded).
pub const NFS4_MAX_REFERRING_LISTS: usize = 16;
/// Largest number of `referring_call4` in one `referring_call_list4` (at most one per slot
/// of the fore channel; Linux's client has at most 1024 slots).
pub const NFS4_MAX_REFERRING_CALLS: usize = 1024;
/// Largest READ result / WRITE argument data accepted by [`Xdr::decode`] (1 MiB, the
/// largest `ca_maxrequestsize` / `rsize` / `wsize` Linux's and FreeBSD's servers use). The
/// `decode_with_max` functions take the bound from the caller instead.
pub const NFS4_MAX_DATA: usize = 1 << 20;

/// An XDR-encodable and -decodable NFSv4.1 item.
pub trait Xdr: Sized {
    /// Append the XDR encoding to `e`. Never panics: what cannot be encoded marks `e`
    /// failed.
    fn encode(&self, e: &mut Encoder);

    /// Decode one item from `d`, leaving it just after the item.
    ///
    /// # Errors
    /// Malformed or truncated input, or a length or count above its bound.
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError>;

    /// The XDR encoding as bytes.
    ///
    /// # Errors
    /// [`XdrError::Alloc`] when the value cannot be encoded.
    fn to_bytes(&self) -> Result<Vec<u8>, XdrError> {
        let mut e = Encoder::new();
        self.encode(&mut e);
        e.finish()
    }
}

impl Xdr for u32 {
    fn encode(&self, e: &mut Encoder) {
        e.u32(*self);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        d.u32()
    }
}

impl Xdr for u64 {
    fn encode(&self, e: &mut Encoder) {
        e.u64(*self);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        d.u64()
    }
}

/// `int64_t`.
impl Xdr for i64 {
    fn encode(&self, e: &mut Encoder) {
        e.u64(*self as u64);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        d.u64().map(|v| v as i64)
    }
}

impl Xdr for bool {
    fn encode(&self, e: &mut Encoder) {
        e.bool(*self);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        d.bool()
    }
}

/// `void`.
impl Xdr for () {
    fn encode(&self, _e: &mut Encoder) {}
    fn decode(_d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Ok(())
    }
}

/// An optional item written as RFC 5662 writes it, an array of at most one (`T x<1>`:
/// `ca_rdma_ird<1>`, `eia_client_impl_id<1>`, `eir_server_impl_id<1>`).
impl<T: Xdr> Xdr for Option<T> {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Some(v) => {
                e.u32(1);
                v.encode(e);
            }
            None => e.u32(0),
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        match d.u32()? {
            0 => Ok(None),
            1 => Ok(Some(T::decode(d)?)),
            _ => Err(XdrError::TooManyEntries {
                what: "optional item (array<1>)",
                max: 1,
            }),
        }
    }
}

/// A result whose failure arm is `void` (nearly every NFSv4 result): the union switched on
/// [`Nfsstat4`], `NFS4_OK` carrying `T`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Res4<T> {
    /// `NFS4_OK` with the `resok` arm.
    Ok(T),
    /// Any other status (never [`Nfsstat4::OK`]: encoding that marks the encoder failed).
    Err(Nfsstat4),
}

impl<T> Res4<T> {
    /// The status.
    pub fn status(&self) -> Nfsstat4 {
        match self {
            Res4::Ok(_) => Nfsstat4::OK,
            Res4::Err(s) => *s,
        }
    }

    /// The `resok` arm, if the status is `NFS4_OK`.
    pub fn ok(&self) -> Option<&T> {
        match self {
            Res4::Ok(v) => Some(v),
            Res4::Err(_) => None,
        }
    }
}

impl<T: Xdr> Res4<T> {
    /// Append the XDR encoding to `e` (see [`Xdr::encode`]).
    pub fn encode(&self, e: &mut Encoder) {
        <Self as Xdr>::encode(self, e)
    }

    /// Decode from `d` (see [`Xdr::decode`]).
    ///
    /// # Errors
    /// Malformed or truncated input.
    pub fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        <Self as Xdr>::decode(d)
    }

    /// The XDR encoding as bytes.
    ///
    /// # Errors
    /// [`XdrError::Alloc`] when the value cannot be encoded.
    pub fn to_bytes(&self) -> Result<Vec<u8>, XdrError> {
        <Self as Xdr>::to_bytes(self)
    }
}

impl<T: Xdr> Xdr for Res4<T> {
    fn encode(&self, e: &mut Encoder) {
        match self {
            Res4::Ok(v) => {
                Nfsstat4::OK.encode(e);
                v.encode(e);
            }
            Res4::Err(s) => {
                if s.is_ok() {
                    e.fail();
                    return;
                }
                s.encode(e);
            }
        }
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        let s = Nfsstat4::decode(d)?;
        if s.is_ok() {
            Ok(Res4::Ok(T::decode(d)?))
        } else {
            Ok(Res4::Err(s))
        }
    }
}

/// Copy `b` into a new vector, reporting allocation failure as [`XdrError::Alloc`].
pub(crate) fn to_vec(b: &[u8]) -> Result<Vec<u8>, XdrError> {
    let mut v = Vec::new();
    v.try_reserve_exact(b.len()).map_err(|_| XdrError::Alloc)?;
    v.extend_from_slice(b);
    Ok(v)
}

/// Variable-length opaque data of at most `max` bytes; a longer one marks `e` failed.
pub(crate) fn put_bounded(e: &mut Encoder, b: &[u8], max: usize) {
    if b.len() > max {
        e.fail();
    } else {
        e.opaque(b);
    }
}

/// The length word of data of `len` bytes; a length beyond 32 bits marks `e` failed.
pub(crate) fn put_len(e: &mut Encoder, len: usize) {
    match u32::try_from(len) {
        Ok(n) => e.u32(n),
        Err(_) => e.fail(),
    }
}

/// Push onto `v`, reporting allocation failure as [`XdrError::Alloc`].
pub(crate) fn try_push<T>(v: &mut Vec<T>, item: T) -> Result<(), XdrError> {
    v.try_reserve(1).map_err(|_| XdrError::Alloc)?;
    v.push(item);
    Ok(())
}

/// A counted array (`T x<>`) of at most `max` items; a longer one marks `e` failed.
pub(crate) fn put_array<T: Xdr>(e: &mut Encoder, items: &[T], max: usize) {
    if items.len() > max {
        e.fail();
        return;
    }
    put_len(e, items.len());
    for it in items {
        it.encode(e);
    }
}

/// The count of a counted array, at most `max` ([`XdrError::TooManyEntries`] beyond).
pub(crate) fn get_count(
    d: &mut Decoder<'_>,
    what: &'static str,
    max: usize,
) -> Result<usize, XdrError> {
    let n = d.u32()? as usize;
    if n > max {
        return Err(XdrError::TooManyEntries { what, max });
    }
    Ok(n)
}

/// Decode a counted array of at most `max` items with `item`. Nothing is reserved up front
/// from the peer's count: the vector grows as items actually decode.
pub(crate) fn get_array_with<T>(
    d: &mut Decoder<'_>,
    what: &'static str,
    max: usize,
    mut item: impl FnMut(&mut Decoder<'_>) -> Result<T, XdrError>,
) -> Result<Vec<T>, XdrError> {
    let n = get_count(d, what, max)?;
    let mut v = Vec::new();
    for _ in 0..n {
        try_push(&mut v, item(d)?)?;
    }
    Ok(v)
}

/// Decode a counted array of at most `max` items.
pub(crate) fn get_array<T: Xdr>(
    d: &mut Decoder<'_>,
    what: &'static str,
    max: usize,
) -> Result<Vec<T>, XdrError> {
    get_array_with(d, what, max, T::decode)
}

/// A fixed-length opaque of `N` bytes.
pub(crate) fn get_fixed<const N: usize>(d: &mut Decoder<'_>) -> Result<[u8; N], XdrError> {
    let at = d.pos();
    let b = d.opaque_fixed(N)?;
    b.try_into().map_err(|_| XdrError::Short { at, need: N })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_are_bounded_and_grow_only_as_items_decode() {
        // A count within the bound that the input does not hold: short, and the vector
        // never reserved room for the count.
        let b = [0, 0, 0, 100, 0, 0, 0, 7];
        let mut d = Decoder::new(&b);
        assert!(matches!(
            get_array::<u32>(&mut d, "x", 1000),
            Err(XdrError::Short { .. })
        ));
        let mut d = Decoder::new(&[0xff, 0xff, 0xff, 0xff]);
        assert_eq!(
            get_array::<u32>(&mut d, "x", 4),
            Err(XdrError::TooManyEntries { what: "x", max: 4 })
        );
        let mut e = Encoder::new();
        put_array(&mut e, &[1u32, 2, 3], 2);
        assert_eq!(e.finish(), Err(XdrError::Alloc));
    }

    #[test]
    fn optional_items_are_arrays_of_at_most_one() {
        assert_eq!(Some(7u32).to_bytes().unwrap(), [0, 0, 0, 1, 0, 0, 0, 7]);
        assert_eq!(None::<u32>.to_bytes().unwrap(), [0, 0, 0, 0]);
        let mut d = Decoder::new(&[0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0, 8]);
        assert_eq!(
            Option::<u32>::decode(&mut d),
            Err(XdrError::TooManyEntries {
                what: "optional item (array<1>)",
                max: 1
            })
        );
    }

    #[test]
    fn results_with_void_failure_arms() {
        let ok: Res4<u32> = Res4::Ok(5);
        assert_eq!(ok.to_bytes().unwrap(), [0, 0, 0, 0, 0, 0, 0, 5]);
        let err: Res4<u32> = Res4::Err(Nfsstat4::ERR_DELAY);
        assert_eq!(err.to_bytes().unwrap(), 10008u32.to_be_bytes());
        assert_eq!(err.status(), Nfsstat4::ERR_DELAY);
        assert_eq!(err.ok(), None);
        assert_eq!(
            Res4::<u32>::Err(Nfsstat4::OK).to_bytes(),
            Err(XdrError::Alloc)
        );
    }
}
