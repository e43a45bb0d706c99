//! Building and consuming RPC messages in Rick Macklem's chain layout, the shape FreeBSD's
//! krpc and the krpc-rdma transport exchange:
//!
//! ```text
//! [XDR mbufs: RPC header + arguments/results up to and including the item's length word]
//! [DDP marker (Mbuf::ddp_marker)]
//! [page mbufs holding the DDP-eligible item's bytes]
//! [XDR pad: 0..3 zero bytes in their own mbuf, when the length is not a multiple of 4]
//! [trailing XDR, usually empty (NFSv3); more COMPOUND operations in NFSv4]
//! ```
//!
//! The DDP region ([`mbuf::Chain::ddp_regions`]) is exactly the page mbufs: it starts at the
//! head's length (the item's XDR position, a multiple of 4) and ends at the pad. The
//! transport turns it into a read chunk (a call) or a write chunk (a reply) and sends neither
//! the pad nor the data inline (RFC 8166); on receipt it hands up the same shape, the pages
//! holding what the peer's chunk carried.
//!
//! * Requester or responder, building: [`ddp_call`] (NFS WRITE, SYMLINK; NFSv4 WRITE,
//!   CREATE of a symlink) and [`ddp_reply`] (READ, READLINK). The data are page mbufs: a
//!   client writing from resident pages (buffer cache, `vm_page`s) makes them with
//!   [`mbuf::Chain::copym`] of its page chain (pages shared by reference, no copy; the copy
//!   is `RDONLY`, which is fine: nobody writes into it); small or odd sources (a symlink
//!   path, a short write from a plain buffer) are copied into fresh pages with
//!   [`data_pages_from_bytes`].
//! * Responder or requester, consuming: [`ddp_data`] finds the items by their markers and
//!   checks each against the XDR length word in front of it; [`write_data_iovecs`] gives the
//!   page pieces of a byte range — what a server hands to `VOP_WRITE` as an iovec, without
//!   copying; when the range is not all page data (the call came inline, without a read
//!   chunk) it fails with [`ChainError::NotPageData`] and the caller copies instead
//!   ([`copy_range`], or [`mbuf::Chain::copydata`] into its own buffer); [`write_data`] does
//!   both.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt;

use mbuf::{Chain, Mbuf, MbufError, PageFragment, PageProvider};

use onc_rpc::xdr::pad;

/// A piece of page data: `len` bytes of page `addr` from in-page offset `offset` (one
/// iovec entry for `VOP_WRITE`, one SGE for the NIC).
pub type PageSlice = PageFragment;

/// Why a chain could not be built or read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChainError {
    /// A data chain handed to [`ddp_call`] / [`ddp_reply`] holds an mbuf that is not a plain
    /// page mbuf: an internal or cluster mbuf, a zero-length mbuf (a marker among them), or a
    /// page mbuf carrying inline header/trailer bytes or the `DDP_START` flag.
    NotPageMbuf {
        /// Index of the mbuf in the data chain.
        index: usize,
    },
    /// An XDR part whose length is not a multiple of 4.
    Unaligned {
        /// Which part (`"head"`, `"tail"`, or `"DDP position"`).
        what: &'static str,
        /// Its length or offset.
        len: usize,
    },
    /// The head does not end with the XDR length word of the data.
    LengthWord {
        /// The last word of the head (`None`: the head is shorter than 4 bytes).
        found: Option<u32>,
        /// The data length.
        data_len: usize,
    },
    /// The data are longer than an XDR length word can say.
    TooLong {
        /// The data length.
        len: usize,
    },
    /// A received DDP region does not match the XDR length word in front of its marker.
    LengthMismatch {
        /// Chain offset of the region.
        offset: usize,
        /// The length word.
        xdr_len: u32,
        /// Bytes in the region.
        region_len: usize,
    },
    /// The byte range is not all page data (some of it is in XDR mbufs or page
    /// header/trailer bytes): the caller must copy it.
    NotPageData {
        /// Start of the range.
        off: usize,
        /// Length of the range.
        len: usize,
    },
    /// Memory could not be allocated.
    Alloc,
    /// An mbuf operation failed.
    Mbuf(MbufError),
}

impl fmt::Display for ChainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ChainError::NotPageMbuf { index } => {
                write!(f, "mbuf {index} of the DDP data is not a plain page mbuf")
            }
            ChainError::Unaligned { what, len } => {
                write!(f, "XDR {what} of {len} bytes is not a multiple of 4")
            }
            ChainError::LengthWord {
                found: Some(w),
                data_len,
            } => write!(
                f,
                "head ends with length word {w}, but the data are {data_len} bytes"
            ),
            ChainError::LengthWord {
                found: None,
                data_len,
            } => write!(
                f,
                "head has no length word for the {data_len} bytes of data"
            ),
            ChainError::TooLong { len } => {
                write!(f, "{len} bytes of data do not fit an XDR length word")
            }
            ChainError::LengthMismatch {
                offset,
                xdr_len,
                region_len,
            } => write!(
                f,
                "DDP region at {offset} holds {region_len} bytes, its XDR length word says {xdr_len}"
            ),
            ChainError::NotPageData { off, len } => {
                write!(f, "bytes {off}+{len} are not all page data")
            }
            ChainError::Alloc => f.write_str("allocation failed"),
            ChainError::Mbuf(e) => write!(f, "mbuf: {e}"),
        }
    }
}

impl From<MbufError> for ChainError {
    fn from(e: MbufError) -> Self {
        match e {
            MbufError::Alloc => ChainError::Alloc,
            e => ChainError::Mbuf(e),
        }
    }
}

/// Check that `data` consists of plain page mbufs only (see [`ChainError::NotPageMbuf`]), as
/// [`ddp_call`] and [`ddp_reply`] do.
///
/// # Errors
/// [`ChainError::NotPageMbuf`] naming the first mbuf that is not a plain page mbuf.
pub fn check_data(data: &Chain) -> Result<(), ChainError> {
    for (index, m) in data.mbufs().enumerate() {
        let plain = m.is_pages()
            && !m.is_empty()
            && !m.is_ddp_marker()
            && m.page_info()
                .is_some_and(|p| p.hdr.is_empty() && p.trl.is_empty());
        if !plain {
            return Err(ChainError::NotPageMbuf { index });
        }
    }
    Ok(())
}

fn check_layout(head: &[u8], data: &Chain, tail: &[u8]) -> Result<usize, ChainError> {
    check_data(data)?;
    let data_len = data.len();
    let word = u32::try_from(data_len).map_err(|_| ChainError::TooLong { len: data_len })?;
    if head.len() % 4 != 0 {
        return Err(ChainError::Unaligned {
            what: "head",
            len: head.len(),
        });
    }
    if tail.len() % 4 != 0 {
        return Err(ChainError::Unaligned {
            what: "tail",
            len: tail.len(),
        });
    }
    let found = head
        .len()
        .checked_sub(4)
        .and_then(|at| head.get(at..))
        .and_then(|b| <[u8; 4]>::try_from(b).ok())
        .map(u32::from_be_bytes);
    if found != Some(word) {
        return Err(ChainError::LengthWord { found, data_len });
    }
    Ok(data_len)
}

fn build(head: &[u8], data: Chain, tail: &[u8]) -> Result<Chain, ChainError> {
    let data_len = check_layout(head, &data, tail)?;
    let mut chain = Chain::from_bytes(head)?;
    chain.append_mbuf(Mbuf::ddp_marker())?;
    chain.cat(data)?;
    let zeros = [0u8; 3];
    if let Some(p) = zeros.get(..pad(data_len)).filter(|p| !p.is_empty()) {
        // Its own mbuf, so the DDP region (a run of page mbufs) ends right here.
        chain.append_mbuf(Mbuf::internal(p)?)?;
    }
    chain.append(tail)?;
    Ok(chain)
}

/// An RPC call carrying a DDP-eligible argument: `head` (RPC call header and the arguments
/// up to and including the item's length word), a DDP marker, `data` (page mbufs), the XDR
/// pad, then `tail` (the arguments after the item; empty for NFSv3 WRITE and SYMLINK, whose
/// item is the last argument).
///
/// For NFSv3 WRITE, `head` ends with WRITE3args' `count`, `stable` and the opaque data's
/// length; for SYMLINK with the `symlink_data` path's length. A SYMLINK path is plain bytes:
/// put it in pages with [`data_pages_from_bytes`] (or send it inline in an ordinary call:
/// DDP is allowed, not required, and a path rarely justifies a chunk).
///
/// # Errors
/// [`ChainError::NotPageMbuf`] if `data` holds anything but plain page mbufs (no
/// header/trailer bytes, no markers); [`ChainError::Unaligned`] if `head` or `tail` is not a
/// multiple of 4 bytes; [`ChainError::LengthWord`] unless `head` ends with the big-endian
/// length of `data`; [`ChainError::TooLong`]; [`ChainError::Alloc`] / [`ChainError::Mbuf`].
/// On error `data` is dropped (its page references released).
pub fn ddp_call(head: &[u8], data: Chain, tail: &[u8]) -> Result<Chain, ChainError> {
    build(head, data, tail)
}

/// An RPC reply carrying a DDP-eligible result (NFS READ data, READLINK path): `head` (RPC
/// reply header and the results up to and including the item's length word), a DDP marker,
/// `data` (page mbufs, e.g. a [`mbuf::Chain::copym`] of the file's cached pages), the XDR
/// pad, then `tail` (for NFSv3 READ and READLINK empty; in NFSv4 the results of the
/// following operations). A responder turns the region into RDMA Writes into the
/// requester's write chunk. Same layout and errors as [`ddp_call`].
///
/// # Errors
/// As [`ddp_call`].
pub fn ddp_reply(head: &[u8], data: Chain, tail: &[u8]) -> Result<Chain, ChainError> {
    build(head, data, tail)
}

/// Fresh pages from `pages` holding a copy of `bytes`, as page mbufs ready for
/// [`ddp_call`] / [`ddp_reply`]. For small or odd sources; data already in pages should be
/// shared with [`mbuf::Chain::copym`] instead (no copy). Empty `bytes` give an empty chain.
///
/// # Errors
/// [`ChainError::Alloc`] if pages or memory run out (nothing is leaked);
/// [`ChainError::Mbuf`] if the provider fails while the bytes are copied.
pub fn data_pages_from_bytes(
    pages: &Arc<dyn PageProvider>,
    bytes: &[u8],
) -> Result<Chain, ChainError> {
    let mut chain = Chain::alloc_pages(pages, bytes.len())?;
    chain.copyback(0, bytes)?;
    Ok(chain)
}

/// A DDP-eligible item found in a received chain by its marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DdpData {
    /// Index of the marker mbuf in the chain.
    pub marker_index: usize,
    /// Chain offset of the item's first byte (its XDR position).
    pub offset: usize,
    /// Bytes of the item (= its XDR length word; the region's length, or the region less
    /// the XDR pad when the peer's read chunk carried the pad too).
    pub len: usize,
}

impl DdpData {
    /// Chain offset just past the item and its XDR pad: where the next XDR item starts.
    pub fn end_with_pad(&self) -> usize {
        self.offset + self.len + pad(self.len)
    }
}

/// The DDP-eligible items of a received chain, one per DDP marker, in order, each checked
/// against the XDR length word in front of its marker. Empty if the chain has no marker
/// (the message came inline, or as a Long Call all in pages: then decode the XDR and use
/// [`write_data_iovecs`] with the decoded offset).
///
/// # Errors
/// [`ChainError::Unaligned`] if a region does not start at a multiple of 4;
/// [`ChainError::LengthWord`] if a marker has no 4 bytes in front of it;
/// [`ChainError::LengthMismatch`] if a region's length is neither its length word nor the
/// length word rounded up to 4 (a malformed call or reply: answer GARBAGE_ARGS, or fail the
/// call);
/// [`ChainError::Alloc`].
pub fn ddp_data(chain: &Chain) -> Result<Vec<DdpData>, ChainError> {
    let mut out = Vec::new();
    out.try_reserve_exact(chain.ddp_regions().count())
        .map_err(|_| ChainError::Alloc)?;
    for r in chain.ddp_regions() {
        if r.offset % 4 != 0 {
            return Err(ChainError::Unaligned {
                what: "DDP position",
                len: r.offset,
            });
        }
        let at = r.offset.checked_sub(4).ok_or(ChainError::LengthWord {
            found: None,
            data_len: r.len,
        })?;
        let mut word = [0u8; 4];
        chain.copydata(at, &mut word)?;
        let xdr_len = u32::from_be_bytes(word);
        let len = usize::try_from(xdr_len).unwrap_or(usize::MAX);
        // A read chunk may carry the item's XDR pad too (RFC 8166 §3.4.5.2 allows it; Linux's
        // svcrdma accepts it): the region is then the item rounded up to 4, and the item is
        // the length word's bytes of it.
        if len != r.len && len.checked_add(pad(len)) != Some(r.len) {
            return Err(ChainError::LengthMismatch {
                offset: r.offset,
                xdr_len,
                region_len: r.len,
            });
        }
        out.push(DdpData {
            marker_index: r.marker_index,
            offset: r.offset,
            len,
        });
    }
    Ok(out)
}

/// The page pieces holding bytes `data_off..data_off + len` of a received call (or reply),
/// in order, without copying: what a server hands to `VOP_WRITE` for an NFS WRITE whose data
/// came in a read chunk (`data_off` = the offset [`ddp_data`] reports, or the decoder's
/// position after the opaque length word). The pieces name pages the chain holds
/// references on: keep the chain alive while they are in use.
///
/// # Errors
/// [`ChainError::NotPageData`] if any byte of the range is not page data (e.g. a small WRITE
/// that came inline: copy it with [`copy_range`] or use [`write_data`]);
/// [`ChainError::Mbuf`] with [`MbufError::OutOfRange`] if the range is outside the chain;
/// [`ChainError::Alloc`].
pub fn write_data_iovecs(
    call: &Chain,
    data_off: usize,
    len: usize,
) -> Result<Vec<PageSlice>, ChainError> {
    let end = data_off
        .checked_add(len)
        .ok_or(ChainError::Mbuf(MbufError::OutOfRange {
            off: data_off,
            len,
            avail: call.len(),
        }))?;
    let not_page = |e: MbufError| match e {
        MbufError::NotPageData => ChainError::NotPageData { off: data_off, len },
        e => ChainError::from(e),
    };
    let n = call
        .page_fragments_in(data_off..end)
        .map_err(not_page)?
        .count();
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|_| ChainError::Alloc)?;
    out.extend(call.page_fragments_in(data_off..end).map_err(not_page)?);
    Ok(out)
}

/// A copy of bytes `off..off + len` of `chain` (the fallback when [`write_data_iovecs`]
/// reports [`ChainError::NotPageData`]; to copy into a buffer of one's own, use
/// [`mbuf::Chain::copydata`]).
///
/// # Errors
/// [`ChainError::Alloc`]; [`ChainError::Mbuf`] (out of range, provider failure).
pub fn copy_range(chain: &Chain, off: usize, len: usize) -> Result<Vec<u8>, ChainError> {
    let mut v = Vec::new();
    v.try_reserve_exact(len).map_err(|_| ChainError::Alloc)?;
    v.resize(len, 0);
    chain.copydata(off, &mut v)?;
    Ok(v)
}

/// The bytes of a received data item, placed (page pieces) when they are all page data,
/// copied otherwise. See [`write_data`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteData {
    /// The item is in page mbufs: no copy was made.
    Pages(Vec<PageSlice>),
    /// The item was (at least partly) in XDR mbufs and was copied.
    Copied(Vec<u8>),
}

/// Bytes `off..off + len` of `chain` as page pieces if possible ([`write_data_iovecs`]),
/// else as a copy ([`copy_range`]).
///
/// # Errors
/// As [`write_data_iovecs`] and [`copy_range`], except [`ChainError::NotPageData`].
pub fn write_data(chain: &Chain, off: usize, len: usize) -> Result<WriteData, ChainError> {
    match write_data_iovecs(chain, off, len) {
        Ok(v) => Ok(WriteData::Pages(v)),
        Err(ChainError::NotPageData { .. }) => copy_range(chain, off, len).map(WriteData::Copied),
        Err(e) => Err(e),
    }
}
