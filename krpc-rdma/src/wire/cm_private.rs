//! RDMA-CM private data for RPC-over-RDMA Version 1 (RFC 8797).
//!
//! Each peer may put 8 bytes in the private data of its RDMA-CM connect request (client) or
//! accept (server):
//!
//! ```text
//!  0               4       5       6       7       8
//!  +---------------+-------+-------+-------+-------+
//!  | 0xf6ab0e18    | vers  | flags | send  | recv  |
//!  +---------------+-------+-------+-------+-------+
//!  vers = 1; flags bit 0: the sender accepts Send With Invalidate;
//!  send / recv: the sender's largest inline Send / Receive, encoded (bytes >> 10) - 1.
//! ```
//!
//! A peer that sends no private data, too few bytes, another magic or another version is
//! treated as advertising the RFC 8166 defaults: 1024-byte inline sends and receives and no
//! remote invalidation ([`CmPrivateData::DEFAULT`]). Bytes after the first 8 (RDMA-CM pads
//! private data) and unknown flag bits are ignored.

use zerocopy::byteorder::big_endian::U32;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use super::error::EncodeError;

/// The format identifier that opens RPC-over-RDMA Version 1 private data.
pub const CM_PRIVATE_MAGIC: u32 = 0xf6ab_0e18;
/// The private data format version this module reads and writes.
pub const CM_PRIVATE_VERSION: u8 = 1;
/// Encoded length of the private data.
pub const CM_PRIVATE_LEN: usize = 8;
/// Inline threshold assumed in each direction when a peer sends no usable private data
/// (RFC 8166 §3.3.2).
pub const DEFAULT_INLINE_SIZE: u32 = 1024;
/// Smallest size the encoding can express (code 0).
pub const MIN_INLINE_SIZE: u32 = 1024;
/// Largest size the encoding can express (code 255): 256 KiB.
pub const MAX_INLINE_SIZE: u32 = 256 * 1024;

bitflags::bitflags! {
    /// The flags byte of the private data.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct CmFlags: u8 {
        /// The sender of the private data accepts Send With Invalidate: its peer may invalidate
        /// the sender's memory registrations remotely when it sends a reply.
        const REMOTE_INVALIDATE = 1 << 0;
    }
}

/// The fixed 8-byte wire layout.
#[derive(FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct CmPrivateWire {
    magic: U32,
    version: u8,
    flags: u8,
    send_size: u8,
    recv_size: u8,
}

static_assertions::const_assert_eq!(core::mem::size_of::<CmPrivateWire>(), CM_PRIVATE_LEN);

/// Encodes an inline size: clamped to [`MIN_INLINE_SIZE`]..=[`MAX_INLINE_SIZE`], rounded down
/// to a whole KiB, then `(bytes >> 10) - 1`. Clamping up to 1 KiB is safe because every
/// RPC-over-RDMA Version 1 peer must handle 1024-byte inline messages.
pub const fn encode_inline_size(bytes: u32) -> u8 {
    let clamped = if bytes < MIN_INLINE_SIZE {
        MIN_INLINE_SIZE
    } else if bytes > MAX_INLINE_SIZE {
        MAX_INLINE_SIZE
    } else {
        bytes
    };
    // In 0..=255 after the clamp.
    ((clamped >> 10) - 1) as u8
}

/// Decodes an inline size code: `(code + 1) << 10` bytes.
pub const fn decode_inline_size(code: u8) -> u32 {
    (code as u32 + 1) << 10
}

/// Rounds a size to what the encoding can carry.
const fn representable(bytes: u32) -> u32 {
    decode_inline_size(encode_inline_size(bytes))
}

/// One peer's advertised transport properties.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CmPrivateData {
    /// Flags ([`CmFlags::REMOTE_INVALIDATE`]).
    pub flags: CmFlags,
    /// Largest RPC-over-RDMA message, in bytes, this peer will send inline.
    pub send_size: u32,
    /// Largest RPC-over-RDMA message, in bytes, this peer can receive inline.
    pub recv_size: u32,
}

impl Default for CmPrivateData {
    fn default() -> Self {
        CmPrivateData::DEFAULT
    }
}

impl CmPrivateData {
    /// What a peer without (usable) private data is taken to advertise: 1024/1024, no remote
    /// invalidation.
    pub const DEFAULT: CmPrivateData = CmPrivateData {
        flags: CmFlags::empty(),
        send_size: DEFAULT_INLINE_SIZE,
        recv_size: DEFAULT_INLINE_SIZE,
    };

    /// Private data advertising the given sizes (made representable, see
    /// [`encode_inline_size`]) and whether we accept Send With Invalidate.
    pub const fn new(send_size: u32, recv_size: u32, accepts_remote_invalidate: bool) -> Self {
        CmPrivateData {
            flags: if accepts_remote_invalidate {
                CmFlags::REMOTE_INVALIDATE
            } else {
                CmFlags::empty()
            },
            send_size: representable(send_size),
            recv_size: representable(recv_size),
        }
    }

    /// Whether the sender of this private data accepts Send With Invalidate.
    pub const fn accepts_remote_invalidate(&self) -> bool {
        self.flags.contains(CmFlags::REMOTE_INVALIDATE)
    }

    /// The same data with the sizes as they would travel on the wire.
    pub const fn normalized(&self) -> Self {
        CmPrivateData {
            flags: self.flags,
            send_size: representable(self.send_size),
            recv_size: representable(self.recv_size),
        }
    }

    /// Decodes private data; `None` if it is shorter than 8 bytes or has another magic or
    /// version. Extra bytes and unknown flag bits are ignored.
    pub fn parse(buf: &[u8]) -> Option<CmPrivateData> {
        let (wire, _) = CmPrivateWire::ref_from_prefix(buf).ok()?;
        if wire.magic.get() != CM_PRIVATE_MAGIC || wire.version != CM_PRIVATE_VERSION {
            return None;
        }
        Some(CmPrivateData {
            flags: CmFlags::from_bits_truncate(wire.flags),
            send_size: decode_inline_size(wire.send_size),
            recv_size: decode_inline_size(wire.recv_size),
        })
    }

    /// What the peer advertises, given the private data it sent (empty if none):
    /// [`parse`](Self::parse), or [`DEFAULT`](Self::DEFAULT) when that fails.
    pub fn from_peer(buf: &[u8]) -> CmPrivateData {
        CmPrivateData::parse(buf).unwrap_or(CmPrivateData::DEFAULT)
    }

    /// The 8-byte encoding (sizes made representable, see [`encode_inline_size`]).
    pub fn to_bytes(&self) -> [u8; CM_PRIVATE_LEN] {
        let wire = CmPrivateWire {
            magic: U32::new(CM_PRIVATE_MAGIC),
            version: CM_PRIVATE_VERSION,
            flags: self.flags.bits(),
            send_size: encode_inline_size(self.send_size),
            recv_size: encode_inline_size(self.recv_size),
        };
        let mut out = [0u8; CM_PRIVATE_LEN];
        out.copy_from_slice(wire.as_bytes());
        out
    }

    /// Writes the 8-byte encoding at the start of `buf`; returns 8.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        let available = buf.len();
        let out = buf
            .get_mut(..CM_PRIVATE_LEN)
            .ok_or(EncodeError::BufferTooShort {
                needed: CM_PRIVATE_LEN,
                available,
            })?;
        out.copy_from_slice(&self.to_bytes());
        Ok(CM_PRIVATE_LEN)
    }
}

/// The inline limits and invalidation mode in force on a connection, from our side.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct InlineThresholds {
    /// Largest RPC-over-RDMA message (transport header + inline RPC data) we may Send:
    /// `min(ours.send_size, peer.recv_size)`.
    pub send: u32,
    /// Largest message the peer may Send us, so the least our Receive buffers must hold:
    /// `min(ours.recv_size, peer.send_size)`.
    pub recv: u32,
    /// Whether we may use Send With Invalidate toward the peer: the peer set
    /// [`CmFlags::REMOTE_INVALIDATE`]. (Whether the peer may use it toward us is our own flag.)
    pub send_with_invalidate: bool,
}

impl Default for InlineThresholds {
    /// The RFC 8166 defaults: 1024 bytes each way, no remote invalidation.
    fn default() -> Self {
        negotiate(&CmPrivateData::DEFAULT, &CmPrivateData::DEFAULT)
    }
}

/// The effective thresholds once both sides' private data are known. `ours` is what we
/// advertised (normalized first, as it travelled); `peer` is what the peer advertised, i.e.
/// [`CmPrivateData::from_peer`] of its private data, which is [`CmPrivateData::DEFAULT`] when it
/// sent none. Each direction takes the smaller of the sender's send size and the receiver's
/// receive size (RFC 8797: a peer never sends more than its partner can receive), so both
/// results lie in [`MIN_INLINE_SIZE`]..=[`MAX_INLINE_SIZE`].
pub fn negotiate(ours: &CmPrivateData, peer: &CmPrivateData) -> InlineThresholds {
    let ours = ours.normalized();
    let peer = peer.normalized();
    InlineThresholds {
        send: ours.send_size.min(peer.recv_size),
        recv: ours.recv_size.min(peer.send_size),
        send_with_invalidate: peer.accepts_remote_invalidate(),
    }
}
