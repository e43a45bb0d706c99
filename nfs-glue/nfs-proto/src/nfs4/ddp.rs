//! Direct data placement of NFSv4 file data over RPC-over-RDMA (RFC 8267, RFC 8166): the
//! data of WRITE4args (a read chunk) and of READ4resok (a write chunk).
//!
//! Unlike NFSv3's, these items are not the last of their message: a COMPOUND may carry
//! operations after the WRITE (e.g. SEQUENCE, PUTFH, WRITE, GETATTR) and results after the
//! READ. The chain layout of [`crate::chain`] has room for that: `[head][DDP marker][pages]
//! [pad][tail]`, the tail holding the XDR after the item.
//!
//! * Requester, WRITE: [`WriteDdpCompound`] encodes the head (RPC header, COMPOUND up to and
//!   including the WRITE data's length word) and the tail (the operations after the WRITE),
//!   and [`WriteDdpCompound::ddp_call`] builds the chain with [`crate::chain::ddp_call`].
//! * Requester, READ: [`locate_read_data`] is the `LocateFn` giving the offset of the first
//!   READ result's data in the reply (after the data's length word), behind whatever results
//!   precede it; [`Compound4Res::decode_read_head`] does the same on a decoder.
//! * Responder, WRITE: [`locate_write_data`] and [`Compound4Args::decode_write_head`] find
//!   the first WRITE's data in a received call.
//!
//! Only the first READ (WRITE) of a COMPOUND is located: RFC 8267 lets every READ use a
//! write chunk, but the offsets of later ones depend on how the earlier data were placed,
//! which is the transport's business.

use alloc::vec::Vec;
use core::fmt;

use mbuf::Chain;
use onc_rpc::rpc::{CallHeader, ReplyHeader};
use onc_rpc::xdr::{Decoder, Encoder, XdrError};

use super::{
    get_count, put_len, try_push, Compound4Args, Compound4Res, NfsArgop4, NfsResop4, Nfsstat4,
    Read4Head, Read4Res, Utf8Str, Write4Args, Write4Head, Xdr, NFS4_MAX_DATA, NFS4_MAX_OPS,
    OP_READ, OP_WRITE,
};
use crate::chain::{ddp_call, ChainError};

/// The most bytes of a reply (or call) the locate functions copy out of a chain and read:
/// 8 KiB, room for the RPC header with the largest verifier (or credential), the COMPOUND
/// header and the results (arguments) in front of the READ (WRITE) — SEQUENCE, PUTFH,
/// OPEN, a GETATTR of modest size. A READ result (WRITE argument) beyond it is not found.
pub const NFS4_LOCATE_PREFIX_MAX: usize = 8192;

/// A COMPOUND call whose WRITE's data travel as an RFC 8267 DDP item (a read chunk): the
/// operations before the WRITE, the WRITE's head (everything but its data), the operations
/// after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteDdpCompound {
    /// `tag`.
    pub tag: Utf8Str,
    /// `minorversion`.
    pub minorversion: u32,
    /// The operations before the WRITE (e.g. SEQUENCE, PUTFH).
    pub before: Vec<NfsArgop4>,
    /// The WRITE without its data.
    pub write: Write4Head,
    /// The operations after the WRITE (e.g. GETATTR).
    pub after: Vec<NfsArgop4>,
}

impl WriteDdpCompound {
    /// Write `COMPOUND4args` from its tag up to and including the WRITE data's length word
    /// `data_len`, not the data or its pad. More than [`NFS4_MAX_OPS`] operations mark `e`
    /// failed.
    pub fn encode_head(&self, e: &mut Encoder, data_len: u32) {
        self.tag.encode(e);
        e.u32(self.minorversion);
        let n = self
            .before
            .len()
            .checked_add(self.after.len())
            .and_then(|n| n.checked_add(1))
            .filter(|&n| n <= NFS4_MAX_OPS);
        match n {
            Some(n) => put_len(e, n),
            None => e.fail(),
        }
        for op in &self.before {
            op.encode(e);
        }
        e.u32(OP_WRITE);
        self.write.encode_head(e, data_len);
    }

    /// Write the operations after the WRITE (the XDR after the data and its pad).
    pub fn encode_tail(&self, e: &mut Encoder) {
        for op in &self.after {
            op.encode(e);
        }
    }

    /// The same call with `data` inline, as [`Compound4Args`] (what a responder decodes once
    /// the read chunk's data are in place).
    ///
    /// # Errors
    /// [`XdrError::Alloc`] if memory runs out.
    pub fn with_data(&self, data: Vec<u8>) -> Result<Compound4Args, XdrError> {
        let mut argarray = Vec::new();
        argarray
            .try_reserve_exact(
                self.before
                    .len()
                    .saturating_add(self.after.len())
                    .saturating_add(1),
            )
            .map_err(|_| XdrError::Alloc)?;
        argarray.extend(self.before.iter().cloned());
        argarray.push(NfsArgop4::Write(Write4Args {
            stateid: self.write.stateid,
            offset: self.write.offset,
            stable: self.write.stable,
            data,
        }));
        argarray.extend(self.after.iter().cloned());
        Ok(Compound4Args {
            tag: self.tag.clone(),
            minorversion: self.minorversion,
            argarray,
        })
    }

    /// The whole call as a Macklem-layout chain: `e` (holding the RPC call header, e.g. from
    /// [`compound_encoder`](super::compound_encoder)) followed by [`Self::encode_head`] with
    /// `data.len()`, a DDP marker, `data` (plain page mbufs), the XDR pad, and
    /// [`Self::encode_tail`] — [`crate::chain::ddp_call`]'s layout, whose DDP region the
    /// transport turns into a read chunk.
    ///
    /// # Errors
    /// [`WriteDdpError::Xdr`] if the head or tail cannot be encoded;
    /// [`WriteDdpError::Chain`] as [`crate::chain::ddp_call`] (e.g. data longer than a
    /// length word, data not plain page mbufs). `data` is dropped on error.
    pub fn ddp_call(&self, mut e: Encoder, data: Chain) -> Result<Chain, WriteDdpError> {
        let len = u32::try_from(data.len())
            .map_err(|_| WriteDdpError::Chain(ChainError::TooLong { len: data.len() }))?;
        self.encode_head(&mut e, len);
        let head = e.finish().map_err(WriteDdpError::Xdr)?;
        let mut t = Encoder::new();
        self.encode_tail(&mut t);
        let tail = t.finish().map_err(WriteDdpError::Xdr)?;
        ddp_call(&head, data, &tail).map_err(WriteDdpError::Chain)
    }
}

/// Why [`WriteDdpCompound::ddp_call`] failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteDdpError {
    /// The XDR could not be encoded (a value beyond its bound, or no memory).
    Xdr(XdrError),
    /// The chain could not be built.
    Chain(ChainError),
}

impl fmt::Display for WriteDdpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteDdpError::Xdr(e) => write!(f, "COMPOUND with a DDP WRITE: {e}"),
            WriteDdpError::Chain(e) => write!(f, "COMPOUND with a DDP WRITE: {e}"),
        }
    }
}

/// `COMPOUND4res` up to the first READ result's data: what
/// [`Compound4Res::decode_read_head`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compound4ReadHead {
    /// `status`.
    pub status: Nfsstat4,
    /// `tag`.
    pub tag: Utf8Str,
    /// The number of results in `resarray` (the READ's and those after it included).
    pub count: usize,
    /// The results before the READ.
    pub before: Vec<NfsResop4>,
    /// The READ result up to its data.
    pub read: Read4Head,
}

impl Compound4Res {
    /// Decode the reply up to and including the first READ result's data length word,
    /// leaving `d` at the first data byte (for `NFS4_OK`; after the READ's status
    /// otherwise). `None` when no result is a READ (then `d` is after the last result). The
    /// data and the results after them need not be present.
    ///
    /// # Errors
    /// Malformed or truncated input, more than [`NFS4_MAX_OPS`] results, a result of an
    /// operation this codec does not implement before the READ.
    pub fn decode_read_head(d: &mut Decoder<'_>) -> Result<Option<Compound4ReadHead>, XdrError> {
        let status = Nfsstat4::decode(d)?;
        let tag = Utf8Str::decode(d)?;
        let count = get_count(d, "COMPOUND4res resarray", NFS4_MAX_OPS)?;
        let mut before = Vec::new();
        for _ in 0..count {
            let op = d.u32()?;
            if op == OP_READ {
                let read = Read4Res::decode_head(d)?;
                return Ok(Some(Compound4ReadHead {
                    status,
                    tag,
                    count,
                    before,
                    read,
                }));
            }
            try_push(&mut before, NfsResop4::decode_body(op, d, NFS4_MAX_DATA)?)?;
        }
        Ok(None)
    }
}

/// `COMPOUND4args` up to the first WRITE's data: what
/// [`Compound4Args::decode_write_head`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compound4WriteHead {
    /// `tag`.
    pub tag: Utf8Str,
    /// `minorversion`.
    pub minorversion: u32,
    /// The number of operations in `argarray` (the WRITE and those after it included).
    pub count: usize,
    /// The operations before the WRITE.
    pub before: Vec<NfsArgop4>,
    /// The WRITE up to its data.
    pub write: Write4Head,
    /// The data's length word.
    pub data_len: u32,
}

impl Compound4Args {
    /// Decode the call up to and including the first WRITE's data length word, leaving `d`
    /// at the first data byte. `None` when no operation is a WRITE (then `d` is after the
    /// last operation). The data and the operations after them need not be present.
    ///
    /// # Errors
    /// Malformed or truncated input, more than [`NFS4_MAX_OPS`] operations, an operation
    /// this codec does not implement before the WRITE.
    pub fn decode_write_head(d: &mut Decoder<'_>) -> Result<Option<Compound4WriteHead>, XdrError> {
        let tag = Utf8Str::decode(d)?;
        let minorversion = d.u32()?;
        let count = get_count(d, "COMPOUND4args argarray", NFS4_MAX_OPS)?;
        let mut before = Vec::new();
        for _ in 0..count {
            let op = d.u32()?;
            if op == OP_WRITE {
                let (write, data_len) = Write4Args::decode_head(d)?;
                return Ok(Some(Compound4WriteHead {
                    tag,
                    minorversion,
                    count,
                    before,
                    write,
                    data_len,
                }));
            }
            try_push(&mut before, NfsArgop4::decode_body(op, d, NFS4_MAX_DATA)?)?;
        }
        Ok(None)
    }
}

/// Copy at most [`NFS4_LOCATE_PREFIX_MAX`] leading bytes of `c` (allocated fallibly).
fn prefix(c: &Chain) -> Option<Vec<u8>> {
    let n = c.len().min(NFS4_LOCATE_PREFIX_MAX);
    let mut v = Vec::new();
    v.try_reserve_exact(n).ok()?;
    v.resize(n, 0);
    c.copydata(0, &mut v).ok()?;
    Some(v)
}

/// [`locate_read_data`] on the bytes of a reply (all of them, or a prefix holding at least
/// the READ result's head).
pub fn locate_read_data_in(reply: &[u8]) -> Option<usize> {
    let mut d = Decoder::new(reply);
    if !ReplyHeader::decode(&mut d).ok()?.is_success() {
        return None;
    }
    let h = Compound4Res::decode_read_head(&mut d).ok()??;
    h.read.status.is_ok().then(|| d.pos())
}

/// The `LocateFn` of a COMPOUND holding a READ: given the inline part of the reply (RPC
/// reply header and `COMPOUND4res`, the READ data absent — or present, it is not read), the
/// byte offset just after the first READ result's data length word. The results before the
/// READ are decoded (they must be of operations this codec implements); those after it are
/// not looked at. `None` when the reply is not an accepted SUCCESS, has no READ result, the
/// READ failed, or the reply is malformed or truncated, or the READ's head lies beyond
/// [`NFS4_LOCATE_PREFIX_MAX`] bytes.
pub fn locate_read_data(reply: &Chain) -> Option<usize> {
    locate_read_data_in(&prefix(reply)?)
}

/// Where the data of the first READ result of a whole reply (the data in it) lie: the
/// offset of the first byte (as [`locate_read_data`] finds it) and the length (the length
/// word), when the reply holds all of it.
pub fn locate_read_item(reply: &Chain) -> Option<(usize, usize)> {
    let off = locate_read_data(reply)?;
    let mut word = [0u8; 4];
    reply.copydata(off.checked_sub(4)?, &mut word).ok()?;
    let len = usize::try_from(u32::from_be_bytes(word)).ok()?;
    (off.checked_add(len)? <= reply.len()).then_some((off, len))
}

/// [`locate_write_data`] on the bytes of a call (all of them, or a prefix holding at least
/// the WRITE's head).
pub fn locate_write_data_in(call: &[u8]) -> Option<usize> {
    let mut d = Decoder::new(call);
    CallHeader::decode(&mut d).ok()?;
    Compound4Args::decode_write_head(&mut d).ok()??;
    Some(d.pos())
}

/// For a responder: given a received COMPOUND call (RPC call header and `COMPOUND4args`),
/// the byte offset just after the first WRITE's data length word — where the data are, or
/// where a read chunk's data belong. `None` when there is no WRITE, the call is malformed or
/// truncated, an operation before the WRITE is not one this codec implements, or the
/// WRITE's head lies beyond [`NFS4_LOCATE_PREFIX_MAX`] bytes. The program, version and
/// procedure of the call header are not checked.
pub fn locate_write_data(call: &Chain) -> Option<usize> {
    locate_write_data_in(&prefix(call)?)
}
