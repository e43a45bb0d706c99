//! The messages the scenarios exchange: XDR-ish calls and replies, NFS-WRITE-like calls with
//! a DDP region, NFS-READ-like replies, and a mixed workload.

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use krpc_rdma::transport::{DdpReply, ReplySpec};
use mbuf::{Chain, Mbuf, MbufError, PageProvider};

/// `n` bytes that differ from page to page and from seed to seed (a misplaced page or a
/// shifted byte shows).
#[inline(never)]
pub fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ ((i >> 12) as u8))
        .collect()
}

/// `[xid][body]` as one chain of ordinary mbufs.
///
/// # Errors
/// Allocation failure.
#[inline(never)]
pub fn xdr_call(xid: u32, body: &[u8]) -> Result<Chain, MbufError> {
    let mut c = Chain::from_bytes(&xid.to_be_bytes())?;
    c.append(body)?;
    Ok(c)
}

/// Page mbufs of `p` holding `data`.
///
/// # Errors
/// Allocation failure.
#[inline(never)]
pub fn pages_with(p: &Arc<dyn PageProvider>, data: &[u8]) -> Result<Chain, MbufError> {
    let mut c = Chain::alloc_pages(p, data.len())?;
    c.copyback(0, data)?;
    Ok(c)
}

/// The XDR roundup pad of an item of `n` bytes.
#[inline(never)]
pub fn pad(n: usize) -> usize {
    (4 - n % 4) % 4
}

/// An NFS-WRITE-like call: xid, 8 bytes of arguments, the length word, a DDP marker, the
/// data in page mbufs, its pad, an 8-byte tail. (No marker for empty data.)
///
/// # Errors
/// Allocation failure.
#[inline(never)]
pub fn write_call(p: &Arc<dyn PageProvider>, xid: u32, data: &[u8]) -> Result<Chain, MbufError> {
    let mut c = xdr_call(xid, &[0xaa; 8])?;
    c.append(&(data.len() as u32).to_be_bytes())?;
    if !data.is_empty() {
        c.append_mbuf(Mbuf::ddp_marker())?;
        c.cat(pages_with(p, data)?)?;
    }
    let mut tail = vec![0u8; pad(data.len())];
    tail.extend_from_slice(&[0xbb; 8]);
    c.append(&tail)?;
    Ok(c)
}

/// Where the data item of [`read_reply`] is: after xid and status, at its length word.
#[inline(never)]
pub fn locate_read(c: &Chain) -> Option<usize> {
    (c.len() >= 12).then_some(12)
}

/// An NFS-READ-like reply: `[xid][status 0][len][marker][data pages][pad][tail 4]`.
///
/// # Errors
/// Allocation failure.
#[inline(never)]
pub fn read_reply(p: &Arc<dyn PageProvider>, xid: u32, data: &[u8]) -> Result<Chain, MbufError> {
    let mut rep = xdr_call(xid, &0u32.to_be_bytes())?;
    rep.append(&(data.len() as u32).to_be_bytes())?;
    rep.append_mbuf(Mbuf::ddp_marker())?;
    if !data.is_empty() {
        rep.cat(pages_with(p, data)?)?;
    }
    let mut tail = vec![0u8; pad(data.len())];
    tail.extend_from_slice(&[0xcc; 4]);
    rep.append(&tail)?;
    Ok(rep)
}

/// The bytes [`read_reply`] must arrive as.
#[inline(never)]
pub fn read_reply_bytes(xid: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&xid.to_be_bytes());
    v.extend_from_slice(&0u32.to_be_bytes());
    v.extend_from_slice(&(data.len() as u32).to_be_bytes());
    v.extend_from_slice(data);
    v.resize(v.len() + pad(data.len()), 0);
    v.extend_from_slice(&[0xcc; 4]);
    v
}

/// A READ-like call expecting `n` bytes of data through a write chunk in fresh pages.
///
/// # Errors
/// Allocation failure.
#[inline(never)]
pub fn read_call(
    p: &Arc<dyn PageProvider>,
    xid: u32,
    n: usize,
) -> Result<(Chain, ReplySpec), MbufError> {
    Ok((
        xdr_call(xid, b"READ")?,
        ReplySpec {
            max_reply: n + 64,
            ddp: Some(DdpReply {
                pages: Chain::alloc_pages(p, n.max(1).next_multiple_of(4))?,
                locate: locate_read,
            }),
        },
    ))
}

/// The calls of the mixed workload; the server answers by the call's first body word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Small call, small reply.
    Small,
    /// NFS-WRITE-like: data in a read chunk.
    Write(usize),
    /// NFS-READ-like: data back through a write chunk into the caller's pages.
    Read(usize),
    /// Long Call and Long Reply.
    Long,
}

/// Small, WRITE 300000, READ 200003, Long, WRITE 5, READ 70000, Small.
pub const WORKLOAD: &[Kind] = &[
    Kind::Small,
    Kind::Write(300_000),
    Kind::Read(200_003),
    Kind::Long,
    Kind::Write(5),
    Kind::Read(70_000),
    Kind::Small,
];

#[inline(never)]
fn tag(t: u8, n: usize) -> Vec<u8> {
    let mut v = vec![t, 0, 0, 0];
    v.extend_from_slice(&(n as u32).to_be_bytes());
    v
}

impl Kind {
    /// The kind of a received call.
    pub fn of(call: &Chain) -> Kind {
        let mut w = [0u8; 8];
        if call.copydata(4, &mut w).is_err() {
            return Kind::Small;
        }
        let [t, _, _, _, a, b, c, d] = w;
        let n = u32::from_be_bytes([a, b, c, d]) as usize;
        match t {
            1 => Kind::Small,
            2 => Kind::Write(n),
            3 => Kind::Read(n),
            _ => Kind::Long,
        }
    }

    /// The call chain and reply spec of a call of this kind.
    ///
    /// # Errors
    /// Allocation failure.
    pub fn call(
        self,
        pa: &Arc<dyn PageProvider>,
        xid: u32,
    ) -> Result<(Chain, ReplySpec), MbufError> {
        Ok(match self {
            Kind::Small => (xdr_call(xid, &tag(1, 0))?, ReplySpec::inline(256)),
            Kind::Write(n) => {
                let mut c = xdr_call(xid, &tag(2, n))?;
                c.append(&(n as u32).to_be_bytes())?;
                c.append_mbuf(Mbuf::ddp_marker())?;
                c.cat(pages_with(pa, &pattern(n, 4))?)?;
                let mut tail = vec![0u8; pad(n)];
                tail.extend_from_slice(&[0xbb; 8]);
                c.append(&tail)?;
                (c, ReplySpec::inline(256))
            }
            Kind::Read(n) => {
                let (_, spec) = read_call(pa, xid, n)?;
                (xdr_call(xid, &tag(3, n))?, spec)
            }
            Kind::Long => {
                let mut body = tag(4, 0);
                body.extend(pattern(6000, 9));
                (xdr_call(xid, &body)?, ReplySpec::inline(20_000))
            }
        })
    }

    /// The server's reply to a call of this kind.
    ///
    /// # Errors
    /// Allocation failure.
    pub fn reply(self, pb: &Arc<dyn PageProvider>, xid: u32) -> Result<Chain, MbufError> {
        match self {
            Kind::Small | Kind::Write(_) => xdr_call(xid, b"ok.."),
            Kind::Read(n) => read_reply(pb, xid, &pattern(n, 3)),
            Kind::Long => xdr_call(xid, &pattern(12_000, 5)),
        }
    }

    /// The reply bytes a call of this kind must get back.
    pub fn expected(self, xid: u32) -> Vec<u8> {
        let mut v = Vec::from(xid.to_be_bytes());
        match self {
            Kind::Small | Kind::Write(_) => v.extend_from_slice(b"ok.."),
            Kind::Read(n) => return read_reply_bytes(xid, &pattern(n, 3)),
            Kind::Long => v.extend(pattern(12_000, 5)),
        }
        v
    }
}

/// xorshift64*: deterministic, no dependency.
pub struct Rng(pub u64);

impl Rng {
    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// A number below `n` (0 for `n` 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
