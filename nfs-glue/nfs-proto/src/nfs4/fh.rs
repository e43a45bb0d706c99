//! The current file handle and attributes (RFC 8881 sections 18.7, 18.8, 18.15, 18.19,
//! 18.21): PUTFH, PUTROOTFH (no arguments), GETFH, LOOKUP, GETATTR. PUTFH, PUTROOTFH and
//! LOOKUP return only a status ([`Nfsstat4`](super::Nfsstat4)).

use super::{Bitmap4, Component4, Fattr4, NfsFh4, Res4};

xdr4_struct! {
    /// `PUTFH4args`.
    #[derive(Hash)]
    pub struct Putfh4Args {
        /// `object`.
        pub object: NfsFh4,
    }
}

xdr4_struct! {
    /// `GETFH4resok`.
    #[derive(Hash)]
    pub struct Getfh4ResOk {
        /// `object`: the current file handle.
        pub object: NfsFh4,
    }
}

/// `GETFH4res`.
pub type Getfh4Res = Res4<Getfh4ResOk>;

xdr4_struct! {
    /// `LOOKUP4args`.
    #[derive(Hash)]
    pub struct Lookup4Args {
        /// `objname`.
        pub objname: Component4,
    }
}

xdr4_struct! {
    /// `GETATTR4args`.
    #[derive(Hash)]
    pub struct Getattr4Args {
        /// `attr_request`.
        pub attr_request: Bitmap4,
    }
}

xdr4_struct! {
    /// `GETATTR4resok`.
    #[derive(Hash)]
    pub struct Getattr4ResOk {
        /// `obj_attributes`.
        pub obj_attributes: Fattr4,
    }
}

/// `GETATTR4res`.
pub type Getattr4Res = Res4<Getattr4ResOk>;
