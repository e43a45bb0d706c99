//! READ and WRITE (RFC 8881 sections 18.22, 18.32), with the head codecs the RFC 8267
//! direct data placement of their data needs.

use alloc::vec::Vec;

use onc_rpc::xdr::{Decoder, Encoder, XdrError};

use super::{put_len, to_vec, Nfsstat4, Res4, StableHow4, Stateid4, Verifier4, Xdr, NFS4_MAX_DATA};

xdr4_struct! {
    /// `READ4args`.
    #[derive(Copy, Hash)]
    pub struct Read4Args {
        /// `stateid`.
        pub stateid: Stateid4,
        /// `offset`.
        pub offset: u64,
        /// `count`: bytes wanted.
        pub count: u32,
    }
}

/// `READ4resok` with the data inline (as after RDMA placement the reply chain holds it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read4ResOk {
    /// `eof`.
    pub eof: bool,
    /// `data` (DDP-eligible, RFC 8267).
    pub data: Vec<u8>,
}

impl Read4ResOk {
    /// Decode with the data bounded by `max_data` bytes.
    ///
    /// # Errors
    /// Malformed or truncated input, [`XdrError::TooLong`], [`XdrError::Alloc`].
    pub fn decode_with_max(d: &mut Decoder<'_>, max_data: usize) -> Result<Self, XdrError> {
        Ok(Read4ResOk {
            eof: d.bool()?,
            data: to_vec(d.opaque("READ4resok data", max_data)?)?,
        })
    }

    /// Write `eof` and the data's length word (`data.len()`), not the data or its pad.
    pub fn encode_head(&self, e: &mut Encoder) {
        e.bool(self.eof);
        put_len(e, self.data.len());
    }
}

/// The data bounded by [`NFS4_MAX_DATA`].
impl Xdr for Read4ResOk {
    fn encode(&self, e: &mut Encoder) {
        self.encode_head(e);
        e.opaque_fixed(&self.data);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Self::decode_with_max(d, NFS4_MAX_DATA)
    }
}

inherent_xdr4!(Read4ResOk);

/// `READ4res`.
pub type Read4Res = Res4<Read4ResOk>;

impl Read4Res {
    /// Decode with the data bounded by `max_data` bytes.
    ///
    /// # Errors
    /// Malformed or truncated input, [`XdrError::TooLong`], [`XdrError::Alloc`].
    pub fn decode_with_max(d: &mut Decoder<'_>, max_data: usize) -> Result<Self, XdrError> {
        let status = Nfsstat4::decode(d)?;
        if status.is_ok() {
            Ok(Res4::Ok(Read4ResOk::decode_with_max(d, max_data)?))
        } else {
            Ok(Res4::Err(status))
        }
    }

    /// Decode the result up to and including the data's length word, leaving `d` at the
    /// first data byte: the status, and for `NFS4_OK` the `eof` flag and the data length
    /// (the data need not be present: it may have been placed by RDMA). A failure result is
    /// its status alone.
    ///
    /// # Errors
    /// Malformed or truncated input.
    pub fn decode_head(d: &mut Decoder<'_>) -> Result<Read4Head, XdrError> {
        let status = Nfsstat4::decode(d)?;
        if !status.is_ok() {
            return Ok(Read4Head {
                status,
                eof: false,
                data_len: 0,
            });
        }
        Ok(Read4Head {
            status,
            eof: d.bool()?,
            data_len: d.u32()?,
        })
    }
}

/// `READ4res` up to, not including, the data: what [`Read4Res::decode_head`] returns and
/// [`Read4Head::encode`] writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Read4Head {
    /// `status`.
    pub status: Nfsstat4,
    /// `eof` (false when the status is not `NFS4_OK`).
    pub eof: bool,
    /// The length of `data` (0 when the status is not `NFS4_OK`).
    pub data_len: u32,
}

impl Read4Head {
    /// Write the result up to and including the data's length word (for `NFS4_OK`), or the
    /// status alone: a server whose data travel as a write chunk (RFC 8267).
    pub fn encode(&self, e: &mut Encoder) {
        self.status.encode(e);
        if self.status.is_ok() {
            e.bool(self.eof);
            e.u32(self.data_len);
        }
    }
}

/// `WRITE4args` up to, not including, the data: what [`Write4Args::decode_head`] returns
/// and [`Write4Head::encode_head`] writes (with the data's length word).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Write4Head {
    /// `stateid`.
    pub stateid: Stateid4,
    /// `offset`.
    pub offset: u64,
    /// `stable`.
    pub stable: StableHow4,
}

impl Write4Head {
    /// Write `stateid`, `offset`, `stable` and the length word `data_len` of the data, not
    /// the data or its pad (RFC 8267: the data travel as a read chunk behind this head).
    pub fn encode_head(&self, e: &mut Encoder, data_len: u32) {
        self.stateid.encode(e);
        e.u64(self.offset);
        self.stable.encode(e);
        e.u32(data_len);
    }
}

/// `WRITE4args` with the data held in the struct.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write4Args {
    /// `stateid`.
    pub stateid: Stateid4,
    /// `offset`.
    pub offset: u64,
    /// `stable`.
    pub stable: StableHow4,
    /// `data` (DDP-eligible, RFC 8267).
    pub data: Vec<u8>,
}

impl Write4Args {
    /// Everything but the data.
    pub fn head(&self) -> Write4Head {
        Write4Head {
            stateid: self.stateid,
            offset: self.offset,
            stable: self.stable,
        }
    }

    /// Write everything up to and including the data's length word (`data.len()`), not the
    /// data or its pad.
    pub fn encode_head(&self, e: &mut Encoder) {
        self.stateid.encode(e);
        e.u64(self.offset);
        self.stable.encode(e);
        put_len(e, self.data.len());
    }

    /// Decode everything up to and including the data's length word, leaving `d` at the
    /// first data byte (`d.pos()` is the data's offset in the buffer). The data need not be
    /// present.
    ///
    /// # Errors
    /// Malformed or truncated input.
    pub fn decode_head(d: &mut Decoder<'_>) -> Result<(Write4Head, u32), XdrError> {
        let head = Write4Head {
            stateid: Stateid4::decode(d)?,
            offset: d.u64()?,
            stable: StableHow4::decode(d)?,
        };
        let len = d.u32()?;
        Ok((head, len))
    }

    /// Decode with the data bounded by `max_data` bytes ([`XdrError::TooLong`] beyond).
    ///
    /// # Errors
    /// Malformed or truncated input, data longer than `max_data`, [`XdrError::Alloc`].
    pub fn decode_with_max(d: &mut Decoder<'_>, max_data: usize) -> Result<Self, XdrError> {
        let (h, len) = Self::decode_head(d)?;
        let len = len as usize;
        if len > max_data {
            return Err(XdrError::TooLong {
                what: "WRITE4args data",
                len,
                max: max_data,
            });
        }
        Ok(Write4Args {
            stateid: h.stateid,
            offset: h.offset,
            stable: h.stable,
            data: to_vec(d.opaque_fixed(len)?)?,
        })
    }
}

/// The data bounded by [`NFS4_MAX_DATA`].
impl Xdr for Write4Args {
    fn encode(&self, e: &mut Encoder) {
        self.encode_head(e);
        e.opaque_fixed(&self.data);
    }
    fn decode(d: &mut Decoder<'_>) -> Result<Self, XdrError> {
        Self::decode_with_max(d, NFS4_MAX_DATA)
    }
}

inherent_xdr4!(Write4Args);

xdr4_struct! {
    /// `WRITE4resok`.
    #[derive(Copy, Hash)]
    pub struct Write4ResOk {
        /// `count`: bytes written.
        pub count: u32,
        /// `committed`.
        pub committed: StableHow4,
        /// `writeverf`.
        pub writeverf: Verifier4,
    }
}

/// `WRITE4res`.
pub type Write4Res = Res4<Write4ResOk>;
