//! The harness's RPC program (test support): a tiny ONC RPC (RFC 5531) program carried by
//! the RPC-over-RDMA transport, so the `server`, `client`, `bench` and `demo` commands of
//! `userspace-harness` and the kernel module's peer runs (`ofed-shim/ofed-testkit/src/selftest/peers.rs`)
//! move real RPCs with real DDP data, the way NFS does. `no_std` + `alloc`: the same code on
//! both sides, built on `onc-rpc`'s headers and XDR and on `mbuf` chains (it was
//! `nfs_glue::harness`, and before that the harness's `rpc.rs`).
//!
//! # Messages
//!
//! Every call starts with the ONC RPC call header: `xid`, `CALL` (0), rpcvers 2,
//! program [`PROGRAM`] (0x4b525043, "KRPC", in the transient range), version [`VERSION`] (1),
//! the procedure, and AUTH_NONE credential and verifier (40 bytes). Every reply starts with
//! `xid`, `REPLY` (1), `MSG_ACCEPTED` (0), an AUTH_NONE verifier and `accept_stat` (24 bytes);
//! the results follow when `accept_stat` is `SUCCESS` (0).
//!
//! | proc | args | results |
//! |---|---|---|
//! | `NULL` = 0 | none | none |
//! | `WRITE` = 1 | `offset: u64`, `data: opaque<>` | `status: u32`, `mismatches: u32`, `count: u32` |
//! | `READ` = 2 | `offset: u64`, `count: u32` | `status: u32`, `data: opaque<>` |
//! | `ECHO` = 3 | `data: opaque<>` | `data: opaque<>` |
//!
//! * **WRITE**'s data is a DDP region (Rick Macklem's layout: the length word, a DDP marker
//!   mbuf, the data in page mbufs, the XDR pad): the transport sends it inline when the whole
//!   call fits the inline threshold, else as a read chunk at XDR position 52 (the server pulls
//!   it by RDMA Read). The server stores the data at `offset` in its per-connection store and
//!   checks every byte against the [pattern](pattern_fill) of its offset: `mismatches` counts
//!   the bytes that differ, `status` is [`STATUS_MISMATCH`] when there are any.
//! * **READ**'s reply data is DDP-eligible: the client provisions a write chunk in its own pages
//!   (`krpc_rdma::transport::DdpReply` with [`locate_read`]: the data item sits
//!   just after the length word, at byte 32 of the reply), the server RDMA-Writes the data
//!   there. A READ outside what was written returns [`STATUS_RANGE`].
//! * **ECHO** carries its data as plain XDR (no DDP marker): a large ECHO is a Long Call
//!   (`RDMA_NOMSG`, position-zero read chunk) and its reply a Long Reply (reply chunk).
//!
//! The store of one connection is a byte buffer as large as the largest `offset + count`
//! written (at most [`MAX_STORE`]); a READ returns what WRITE wrote.
//!
//! # The data pattern
//!
//! The byte at offset `o` is byte `o % 8` (little-endian) of
//! `(o / 8) * 0x9E3779B97F4A7C15 ^ 0x6B72_7063_2D72_646D`: derived from the offset only, so a
//! client verifies a READ and a server a WRITE exactly, 8 bytes per multiplication, with no
//! copy of the expected data.
#![no_std]
#![forbid(unsafe_code)]

extern crate alloc;

use alloc::format;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use mbuf::{Chain, Fragment, Mbuf, PageProvider};
use onc_rpc::rpc::{AcceptStat, Auth, CallHeader, ReplyHeader};
use onc_rpc::xdr::{Decoder, Encoder};

/// The program number (transient range): "KRPC".
pub const PROGRAM: u32 = 0x4b52_5043;
/// The program version.
pub const VERSION: u32 = 1;
/// NULL: no arguments, no results.
pub const PROC_NULL: u32 = 0;
/// WRITE: store data at an offset.
pub const PROC_WRITE: u32 = 1;
/// READ: return data from an offset.
pub const PROC_READ: u32 = 2;
/// ECHO: return the (inline) argument.
pub const PROC_ECHO: u32 = 3;

/// Result status: success.
pub const STATUS_OK: u32 = 0;
/// Result status: the written data did not match the pattern of its offset.
pub const STATUS_MISMATCH: u32 = 1;
/// Result status: offset/count outside the store (or beyond [`MAX_STORE`]).
pub const STATUS_RANGE: u32 = 2;

/// Largest store of one connection.
pub const MAX_STORE: usize = 256 << 20;

/// Bytes of the call header (xid .. verifier).
pub const CALL_HEADER_LEN: usize = 40;
/// Bytes of the accepted-reply header (xid .. accept_stat).
pub const REPLY_HEADER_LEN: usize = 24;
/// XDR position of WRITE's data (call header, offset, length word).
pub const WRITE_DATA_POS: usize = CALL_HEADER_LEN + 12;
/// Offset of READ's data in the reply (reply header, status, length word).
pub const READ_DATA_POS: usize = REPLY_HEADER_LEN + 8;

/// The workload of a client run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// NULL calls.
    Null,
    /// WRITE calls of `size` bytes.
    Write,
    /// READ calls of `size` bytes.
    Read,
}

impl Workload {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Null => "null",
            Workload::Write => "write",
            Workload::Read => "read",
        }
    }
}

fn pattern_word(w: u64) -> [u8; 8] {
    (w.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x6B72_7063_2D72_646D).to_le_bytes()
}

/// The pattern word of byte offsets `8 * w .. 8 * w + 8`, as a little-endian `u64`.
fn pattern_u64(w: u64) -> u64 {
    u64::from_le_bytes(pattern_word(w))
}

/// Walk `len` bytes from offset `off` in pieces aligned to the pattern words:
/// `f(position in the walk, pattern bytes)`.
fn pattern_pieces(off: u64, len: usize, mut f: impl FnMut(usize, &[u8])) {
    let mut done = 0usize;
    while done < len {
        let o = off + done as u64;
        let word = pattern_word(o / 8);
        let start = (o % 8) as usize;
        let n = (8 - start).min(len - done);
        if let Some(p) = word.get(start..start + n) {
            f(done, p);
        }
        done += n;
    }
}

/// Split `len` bytes at offset `off` into an unaligned head, whole pattern words, and a tail:
/// `(head length, number of words)`.
fn pattern_split(off: u64, len: usize) -> (usize, usize) {
    let head = ((8 - off % 8) % 8) as usize;
    let head = head.min(len);
    (head, (len - head) / 8)
}

/// Fill `buf` with the pattern of offsets `off..off + buf.len()`.
pub fn pattern_fill(off: u64, buf: &mut [u8]) {
    let (head, words) = pattern_split(off, buf.len());
    let (h, rest) = buf.split_at_mut(head);
    pattern_pieces(off, h.len(), |at, p| {
        if let Some(d) = h.get_mut(at..at + p.len()) {
            d.copy_from_slice(p);
        }
    });
    let (mid, tail) = rest.split_at_mut(words * 8);
    let first = (off + head as u64) / 8;
    for (i, d) in mid.chunks_exact_mut(8).enumerate() {
        d.copy_from_slice(&pattern_word(first + i as u64));
    }
    let t_off = off + (head + words * 8) as u64;
    pattern_pieces(t_off, tail.len(), |at, p| {
        if let Some(d) = tail.get_mut(at..at + p.len()) {
            d.copy_from_slice(p);
        }
    });
}

/// Bytes of `buf` that differ from the pattern of offsets `off..`.
pub fn pattern_mismatches(off: u64, buf: &[u8]) -> u64 {
    fn count(d: &[u8], p: &[u8]) -> u64 {
        d.iter().zip(p).filter(|(a, b)| a != b).count() as u64
    }
    let (head, words) = pattern_split(off, buf.len());
    let (h, rest) = buf.split_at(head);
    let (mid, tail) = rest.split_at(words * 8);
    let mut bad = 0u64;
    pattern_pieces(off, h.len(), |at, p| {
        bad += h.get(at..at + p.len()).map_or(0, |d| count(d, p));
    });
    let first = (off + head as u64) / 8;
    for (i, d) in mid.chunks_exact(8).enumerate() {
        let want = pattern_u64(first + i as u64);
        let got = d.try_into().map_or(!want, u64::from_le_bytes);
        if got != want {
            bad += count(d, &want.to_le_bytes());
        }
    }
    let t_off = off + (head + words * 8) as u64;
    pattern_pieces(t_off, tail.len(), |at, p| {
        bad += tail.get(at..at + p.len()).map_or(0, |d| count(d, p));
    });
    bad
}

/// Call `f(position, bytes)` for every byte of `chain` in `start..start + len`, mapping page
/// pieces through `pages` (the provider the chain's pages come from).
///
/// # Errors
/// A description when the range is outside the chain or a page cannot be mapped.
pub fn walk(
    chain: &Chain,
    start: usize,
    len: usize,
    pages: &dyn PageProvider,
    f: &mut dyn FnMut(usize, &[u8]),
) -> Result<(), String> {
    let frags = chain
        .fragments_in(start..start + len)
        .map_err(|e| format!("bad data range: {e}"))?;
    let mut pos = 0usize;
    for fr in frags {
        match fr {
            Fragment::Bytes(b) => {
                f(pos, b);
                pos += b.len();
            }
            Fragment::Page { addr, offset, len } => {
                let mut bad = true;
                pages
                    .with_page(addr, &mut |pg| {
                        if let Some(b) = pg.get(offset..offset + len) {
                            f(pos, b);
                            bad = false;
                        }
                    })
                    .map_err(|e| format!("page {addr:#x}: {e}"))?;
                if bad {
                    return Err(format!("page {addr:#x}: fragment {offset}+{len}"));
                }
                pos += len;
            }
        }
    }
    Ok(())
}

/// Page mbufs holding the pattern of offsets `off..off + len`, from `pages`.
///
/// Each fragment's pattern is made in one page-sized buffer on the heap (not the stack: the
/// kernel self-test runs this on a 16 KiB stack) and stored with one
/// [`PageProvider::write_page`]: a provider whose pages are reached by copies (the verbs
/// arena, kernel pages) then copies each byte once. Through `with_page_mut` the same fill
/// cost such a provider a read of the page, a second copy and a byte-by-byte comparison of
/// the whole page (`edit_page_by_copy`) — on the benchmark's client, every 1 MiB WRITE.
///
/// # Errors
/// Page allocation or mapping failed.
pub fn pattern_pages(pages: &Arc<dyn PageProvider>, off: u64, len: usize) -> Result<Chain, String> {
    let c = Chain::alloc_pages(pages, len).map_err(|e| format!("page allocation: {e}"))?;
    let mut done = 0usize;
    let frags: Vec<(u64, usize, usize)> = c
        .fragments()
        .filter_map(|f| match f {
            Fragment::Page { addr, offset, len } => Some((addr, offset, len)),
            Fragment::Bytes(_) => None,
        })
        .collect();
    let mut buf = Vec::new();
    buf.try_reserve_exact(mbuf::PAGE_SIZE)
        .map_err(|e| format!("pattern buffer: {e}"))?;
    buf.resize(mbuf::PAGE_SIZE, 0u8);
    for (addr, o, l) in frags {
        let d = buf
            .get_mut(..l)
            .ok_or_else(|| format!("page {addr:#x}: fragment {o}+{l}"))?;
        pattern_fill(off + done as u64, d);
        pages
            .write_page(addr, o, d)
            .map_err(|e| format!("page {addr:#x}: {e}"))?;
        done += l;
    }
    Ok(c)
}

fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_be_bytes()).collect()
}

/// The call header (AUTH_NONE), built by the `onc-rpc` codec.
fn call_header(xid: u32, proc_: u32) -> Result<Vec<u8>, String> {
    CallHeader {
        xid,
        prog: PROGRAM,
        vers: VERSION,
        proc_,
        cred: Auth::None,
        verf: Auth::None,
    }
    .to_bytes()
    .map_err(|e| format!("building a call header: {e}"))
}

/// The accepted-reply header with `stat` (AUTH_NONE verifier).
fn reply_header(xid: u32, stat: AcceptStat) -> Result<Vec<u8>, String> {
    let mut e = Encoder::new();
    ReplyHeader::Accepted {
        xid,
        verf: Auth::None,
        stat,
    }
    .encode(&mut e);
    e.finish()
        .map_err(|e| format!("building a reply header: {e}"))
}

/// The reply header of `c` if it is an accepted SUCCESS whose results start at
/// [`REPLY_HEADER_LEN`].
fn success_header(c: &Chain) -> Result<ReplyHeader, String> {
    let mut h = [0u8; REPLY_HEADER_LEN];
    c.copydata(0, &mut h).map_err(|_| "too short".to_string())?;
    let mut d = Decoder::new(&h);
    let r = ReplyHeader::decode(&mut d).map_err(|e| e.to_string())?;
    match &r {
        ReplyHeader::Accepted {
            stat: AcceptStat::Success,
            ..
        } if d.pos() == REPLY_HEADER_LEN => Ok(r),
        ReplyHeader::Accepted {
            stat: AcceptStat::Success,
            ..
        } => Err("unexpected verifier".into()),
        ReplyHeader::Accepted { stat, .. } => Err(format!("accept_stat {stat:?}")),
        ReplyHeader::Denied { why, .. } => Err(format!("call denied ({why:?})")),
    }
}

fn xdr_pad(len: usize) -> usize {
    (4 - len % 4) % 4
}

fn mbuf_err(e: mbuf::MbufError) -> String {
    format!("building a message: {e}")
}

/// A NULL call.
///
/// # Errors
/// Allocation failed.
pub fn null_call(xid: u32) -> Result<Chain, String> {
    Chain::from_bytes(&call_header(xid, PROC_NULL)?).map_err(mbuf_err)
}

/// A WRITE call of `len` pattern bytes at `offset`, the data as a DDP region in pages of
/// `pages`.
///
/// # Errors
/// Allocation failed.
pub fn write_call(
    pages: &Arc<dyn PageProvider>,
    xid: u32,
    offset: u64,
    len: usize,
) -> Result<Chain, String> {
    let mut head = call_header(xid, PROC_WRITE)?;
    head.extend_from_slice(&offset.to_be_bytes());
    head.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    let mut c = Chain::from_bytes(&head).map_err(mbuf_err)?;
    c.append_mbuf(Mbuf::ddp_marker()).map_err(mbuf_err)?;
    c.cat(pattern_pages(pages, offset, len)?)
        .map_err(mbuf_err)?;
    let pad = xdr_pad(len);
    if pad > 0 {
        c.append(&vec![0u8; pad]).map_err(mbuf_err)?;
    }
    Ok(c)
}

/// A READ call of `count` bytes at `offset`.
///
/// # Errors
/// Allocation failed.
pub fn read_call(xid: u32, offset: u64, count: u32) -> Result<Chain, String> {
    let mut head = call_header(xid, PROC_READ)?;
    head.extend_from_slice(&offset.to_be_bytes());
    head.extend_from_slice(&count.to_be_bytes());
    Chain::from_bytes(&head).map_err(mbuf_err)
}

/// An ECHO call whose argument (plain XDR, no DDP region) is `len` pattern bytes.
///
/// # Errors
/// Allocation failed.
pub fn echo_call(xid: u32, len: usize) -> Result<Chain, String> {
    let mut v = call_header(xid, PROC_ECHO)?;
    v.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
    let at = v.len();
    v.resize(at + len + xdr_pad(len), 0);
    if let Some(d) = v.get_mut(at..at + len) {
        pattern_fill(0, d);
    }
    Chain::from_bytes(&v).map_err(mbuf_err)
}

/// Where READ's data goes in the (reduced) reply: just after its length word, when the
/// reply is an accepted `SUCCESS` with status OK.
pub fn locate_read(c: &Chain) -> Option<usize> {
    success_header(c).ok()?;
    (word_at(c, REPLY_HEADER_LEN)? == STATUS_OK).then_some(READ_DATA_POS)
}

fn word_at(c: &Chain, off: usize) -> Option<u32> {
    let mut b = [0u8; 4];
    c.copydata(off, &mut b).ok()?;
    Some(u32::from_be_bytes(b))
}

/// Check the accepted-reply header of `reply` for `xid`; the results start at
/// [`REPLY_HEADER_LEN`].
///
/// # Errors
/// What is wrong with the reply.
pub fn check_reply_header(reply: &Chain, xid: u32) -> Result<(), String> {
    let h = success_header(reply).map_err(|e| format!("reply {xid:#x}: {e}"))?;
    if h.xid() != xid {
        return Err(format!("reply {xid:#x}: not a reply to this call"));
    }
    Ok(())
}

/// WRITE's results: `(status, mismatches, count)`.
///
/// # Errors
/// A malformed reply.
pub fn write_result(reply: &Chain, xid: u32) -> Result<(u32, u32, u32), String> {
    check_reply_header(reply, xid)?;
    let w = |i: usize| {
        word_at(reply, REPLY_HEADER_LEN + i * 4)
            .ok_or_else(|| format!("WRITE reply {xid:#x} too short"))
    };
    Ok((w(0)?, w(1)?, w(2)?))
}

/// Verify READ's reply against the pattern of `offset`: `Ok(mismatched bytes)`.
///
/// # Errors
/// A malformed reply, a bad status or a wrong length.
pub fn verify_read(
    reply: &Chain,
    xid: u32,
    offset: u64,
    count: usize,
    pages: &dyn PageProvider,
) -> Result<u64, String> {
    check_reply_header(reply, xid)?;
    let status = word_at(reply, REPLY_HEADER_LEN).unwrap_or(u32::MAX);
    if status != STATUS_OK {
        return Err(format!("READ {xid:#x}: status {status}"));
    }
    let len = word_at(reply, REPLY_HEADER_LEN + 4).unwrap_or(0) as usize;
    if len != count {
        return Err(format!("READ {xid:#x}: {len} bytes, asked {count}"));
    }
    let mut bad = 0u64;
    walk(reply, READ_DATA_POS, len, pages, &mut |at, b| {
        bad += pattern_mismatches(offset + at as u64, b);
    })?;
    Ok(bad)
}

/// Verify ECHO's reply: the argument of `len` pattern bytes came back.
///
/// # Errors
/// A malformed reply or different data.
pub fn verify_echo(
    reply: &Chain,
    xid: u32,
    len: usize,
    pages: &dyn PageProvider,
) -> Result<(), String> {
    check_reply_header(reply, xid)?;
    let n = word_at(reply, REPLY_HEADER_LEN).unwrap_or(0) as usize;
    if n != len {
        return Err(format!("ECHO {xid:#x}: {n} bytes back, sent {len}"));
    }
    let mut bad = 0u64;
    walk(reply, REPLY_HEADER_LEN + 4, len, pages, &mut |at, b| {
        bad += pattern_mismatches(at as u64, b);
    })?;
    if bad > 0 {
        return Err(format!("ECHO {xid:#x}: {bad} bytes differ"));
    }
    Ok(())
}

/// Bytes as decimal megabytes with one decimal, rounded (no floating point: this runs in
/// kernels).
struct Megabytes(u64);

impl core::fmt::Display for Megabytes {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let tenths = self.0.saturating_add(50_000) / 100_000;
        write!(f, "{}.{}", tenths / 10, tenths % 10)
    }
}

/// Server-side statistics of one connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    /// NULL calls.
    pub nulls: u64,
    /// WRITE calls.
    pub writes: u64,
    /// READ calls.
    pub reads: u64,
    /// ECHO calls.
    pub echoes: u64,
    /// Calls answered with an error (`accept_stat` or status not OK).
    pub errors: u64,
    /// WRITE bytes that did not match the pattern.
    pub mismatches: u64,
    /// Bytes written by WRITE.
    pub bytes_in: u64,
    /// Bytes returned by READ.
    pub bytes_out: u64,
}

impl ServerStats {
    /// Calls of every kind.
    pub fn calls(&self) -> u64 {
        self.nulls + self.writes + self.reads + self.echoes
    }

    /// "N calls (null …, write …, read …, echo …), X MB written, Y MB read, M mismatched
    /// bytes, E errors": the server's one-line summary, per connection and in total.
    pub fn summary(&self) -> String {
        format!(
            "{} calls (null {}, write {}, read {}, echo {}), {} MB written, {} MB read, \
             {} mismatched bytes, {} errors",
            self.calls(),
            self.nulls,
            self.writes,
            self.reads,
            self.echoes,
            Megabytes(self.bytes_in),
            Megabytes(self.bytes_out),
            self.mismatches,
            self.errors
        )
    }

    /// Add `o` to `self`.
    pub fn add(&mut self, o: &ServerStats) {
        self.nulls += o.nulls;
        self.writes += o.writes;
        self.reads += o.reads;
        self.echoes += o.echoes;
        self.errors += o.errors;
        self.mismatches += o.mismatches;
        self.bytes_in += o.bytes_in;
        self.bytes_out += o.bytes_out;
    }
}

/// The server side of the program for one connection: its store and statistics.
pub struct Server {
    pages: Arc<dyn PageProvider>,
    store: Vec<u8>,
    /// Statistics.
    pub stats: ServerStats,
}

impl core::fmt::Debug for Server {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Server")
            .field("store", &self.store.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// A server allocating reply pages from `pages` (the pages of the connection's calls
    /// come from there too).
    pub fn new(pages: Arc<dyn PageProvider>) -> Self {
        Server {
            pages,
            store: Vec::new(),
            stats: ServerStats::default(),
        }
    }

    fn reject(&mut self, xid: u32, stat: AcceptStat) -> Result<Chain, String> {
        self.stats.errors += 1;
        Chain::from_bytes(&reply_header(xid, stat)?).map_err(mbuf_err)
    }

    /// A `SYSTEM_ERR` reply (when a reply could not be built).
    ///
    /// # Errors
    /// Allocation failed.
    pub fn system_error(&mut self, xid: u32) -> Result<Chain, String> {
        self.reject(xid, AcceptStat::SystemErr)
    }

    /// Execute one call and build its reply.
    ///
    /// # Errors
    /// The reply could not be built (allocation).
    pub fn handle(&mut self, call: &Chain) -> Result<Chain, String> {
        let mut h = [0u8; CALL_HEADER_LEN];
        let xid = word_at(call, 0).unwrap_or(0);
        if call.copydata(0, &mut h).is_err() {
            return self.reject(xid, AcceptStat::GarbageArgs);
        }
        let mut d = Decoder::new(&h);
        let hdr = match CallHeader::decode(&mut d) {
            // AUTH_NONE credential and verifier: the arguments start at CALL_HEADER_LEN.
            Ok(hdr) if d.pos() == CALL_HEADER_LEN => hdr,
            _ => return self.reject(xid, AcceptStat::GarbageArgs),
        };
        if hdr.prog != PROGRAM {
            return self.reject(xid, AcceptStat::ProgUnavail);
        }
        if hdr.vers != VERSION {
            return self.reject(
                xid,
                AcceptStat::ProgMismatch {
                    low: VERSION,
                    high: VERSION,
                },
            );
        }
        match hdr.proc_ {
            PROC_NULL => {
                self.stats.nulls += 1;
                Chain::from_bytes(&reply_header(xid, AcceptStat::Success)?).map_err(mbuf_err)
            }
            PROC_WRITE => self.write(call, xid),
            PROC_READ => self.read(call, xid),
            PROC_ECHO => self.echo(call, xid),
            _ => self.reject(xid, AcceptStat::ProcUnavail),
        }
    }

    fn offset_arg(call: &Chain) -> Option<u64> {
        let hi = word_at(call, CALL_HEADER_LEN)?;
        let lo = word_at(call, CALL_HEADER_LEN + 4)?;
        Some((u64::from(hi) << 32) | u64::from(lo))
    }

    fn write(&mut self, call: &Chain, xid: u32) -> Result<Chain, String> {
        self.stats.writes += 1;
        let (Some(offset), Some(len)) = (
            Self::offset_arg(call),
            word_at(call, CALL_HEADER_LEN + 8).map(|l| l as usize),
        ) else {
            return self.reject(xid, AcceptStat::GarbageArgs);
        };
        let end = usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_add(len))
            .filter(|&e| e <= MAX_STORE);
        let mut status = STATUS_OK;
        let mut bad = 0u64;
        match end {
            Some(end) if WRITE_DATA_POS + len <= call.len() => {
                if self.store.len() < end {
                    if self.store.try_reserve(end - self.store.len()).is_err() {
                        return self.system_error(xid);
                    }
                    self.store.resize(end, 0);
                }
                // One copy, from the call's pages into the store, then the check there.
                let dst = self
                    .store
                    .get_mut(end - len..end)
                    .ok_or_else(|| format!("store range {}..{end}", end - len))?;
                call.copydata(WRITE_DATA_POS, dst)
                    .map_err(|e| format!("WRITE data: {e}"))?;
                bad = pattern_mismatches(offset, dst);
                self.stats.bytes_in += len as u64;
                if bad > 0 {
                    status = STATUS_MISMATCH;
                    self.stats.mismatches += bad;
                }
            }
            _ => status = STATUS_RANGE,
        }
        if status != STATUS_OK {
            self.stats.errors += 1;
        }
        let mut v = reply_header(xid, AcceptStat::Success)?;
        let count = if status == STATUS_RANGE { 0 } else { len };
        v.extend(words(&[
            status,
            u32::try_from(bad).unwrap_or(u32::MAX),
            u32::try_from(count).unwrap_or(u32::MAX),
        ]));
        Chain::from_bytes(&v).map_err(mbuf_err)
    }

    fn read(&mut self, call: &Chain, xid: u32) -> Result<Chain, String> {
        self.stats.reads += 1;
        let (Some(offset), Some(count)) = (
            Self::offset_arg(call),
            word_at(call, CALL_HEADER_LEN + 8).map(|l| l as usize),
        ) else {
            return self.reject(xid, AcceptStat::GarbageArgs);
        };
        let range = usize::try_from(offset)
            .ok()
            .and_then(|o| Some(o..o.checked_add(count)?))
            .filter(|r| r.end <= self.store.len());
        let mut v = reply_header(xid, AcceptStat::Success)?;
        let Some(range) = range else {
            self.stats.errors += 1;
            v.extend(words(&[STATUS_RANGE, 0]));
            return Chain::from_bytes(&v).map_err(mbuf_err);
        };
        v.extend(words(&[
            STATUS_OK,
            u32::try_from(count).unwrap_or(u32::MAX),
        ]));
        let mut c = Chain::from_bytes(&v).map_err(mbuf_err)?;
        let data = Chain::alloc_pages(&self.pages, count).map_err(mbuf_err)?;
        let frags: Vec<(u64, usize, usize)> = data
            .fragments()
            .filter_map(|f| match f {
                Fragment::Page { addr, offset, len } => Some((addr, offset, len)),
                Fragment::Bytes(_) => None,
            })
            .collect();
        let mut at = range.start;
        for (addr, o, l) in frags {
            let src = self.store.get(at..at + l).unwrap_or(&[]);
            self.pages
                .write_page(addr, o, src)
                .map_err(|e| format!("page {addr:#x}: {e}"))?;
            at += l;
        }
        c.append_mbuf(Mbuf::ddp_marker()).map_err(mbuf_err)?;
        c.cat(data).map_err(mbuf_err)?;
        let pad = xdr_pad(count);
        if pad > 0 {
            c.append(&vec![0u8; pad]).map_err(mbuf_err)?;
        }
        self.stats.bytes_out += count as u64;
        Ok(c)
    }

    fn echo(&mut self, call: &Chain, xid: u32) -> Result<Chain, String> {
        self.stats.echoes += 1;
        let Some(len) = word_at(call, CALL_HEADER_LEN).map(|l| l as usize) else {
            return self.reject(xid, AcceptStat::GarbageArgs);
        };
        if CALL_HEADER_LEN + 4 + len > call.len() {
            return self.reject(xid, AcceptStat::GarbageArgs);
        }
        let mut v = reply_header(xid, AcceptStat::Success)?;
        v.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
        let at = v.len();
        v.resize(at + len + xdr_pad(len), 0);
        let mut data = Vec::new();
        if data.try_reserve(len).is_err() {
            return self.system_error(xid);
        }
        walk(call, CALL_HEADER_LEN + 4, len, &*self.pages, &mut |_, b| {
            data.extend_from_slice(b)
        })?;
        if let Some(d) = v.get_mut(at..at + len) {
            d.copy_from_slice(data.get(..len).unwrap_or(&[]));
        }
        Chain::from_bytes(&v).map_err(mbuf_err)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use alloc::vec;
    use mbuf::HeapPageArena;

    fn arena() -> Arc<dyn PageProvider> {
        Arc::new(HeapPageArena::new(2048).unwrap())
    }

    #[test]
    fn pattern_is_offset_derived_and_checkable_in_pieces() {
        let mut a = vec![0u8; 1000];
        pattern_fill(13, &mut a);
        let mut b = vec![0u8; 990];
        pattern_fill(23, &mut b);
        assert_eq!(a[10..], b[..]);
        assert_eq!(pattern_mismatches(13, &a), 0);
        a[500] ^= 1;
        a[7] ^= 0xff;
        assert_eq!(pattern_mismatches(13, &a), 2);
    }

    /// The word-at-a-time fill and check agree with the byte definition of the pattern
    /// (byte `o` is byte `o % 8` of `pattern_word(o / 8)`) at every alignment and length.
    #[test]
    fn pattern_fast_paths_match_the_byte_definition() {
        for off in 0..20u64 {
            for len in 0..45usize {
                let want: Vec<u8> = (off..off + len as u64)
                    .map(|o| pattern_word(o / 8)[(o % 8) as usize])
                    .collect();
                let mut got = vec![0u8; len];
                pattern_fill(off, &mut got);
                assert_eq!(got, want, "off {off} len {len}");
                assert_eq!(pattern_mismatches(off, &got), 0);
                for i in 0..len {
                    let mut bad = got.clone();
                    bad[i] ^= 0x5a;
                    if i + 3 < len {
                        bad[i + 3] = bad[i + 3].wrapping_add(1);
                    }
                    let n = if i + 3 < len { 2 } else { 1 };
                    assert_eq!(
                        pattern_mismatches(off, &bad),
                        n,
                        "off {off} len {len} at {i}"
                    );
                }
            }
        }
    }

    #[test]
    fn write_then_read_round_trips_through_the_server() {
        let p = arena();
        let mut s = Server::new(p.clone());
        for (off, len) in [
            (0u64, 1usize),
            (4096, 4095),
            (8192, 4097),
            (100_003, 70_000),
        ] {
            let call = write_call(&p, 7, off, len).unwrap();
            assert_eq!(call.ddp_regions().next().unwrap().offset, WRITE_DATA_POS);
            let r = s.handle(&call).unwrap();
            assert_eq!(write_result(&r, 7).unwrap(), (STATUS_OK, 0, len as u32));
            let r = s.handle(&read_call(8, off, len as u32).unwrap()).unwrap();
            assert_eq!(locate_read(&r), Some(READ_DATA_POS));
            assert_eq!(verify_read(&r, 8, off, len, &*p).unwrap(), 0);
            // Read at another offset: the pattern differs.
            if len > 8 {
                let r = s.handle(&read_call(9, off + 1, len as u32 - 1).unwrap());
                assert!(verify_read(&r.unwrap(), 9, off, len - 1, &*p).unwrap() > 0);
            }
        }
        let r = s.handle(&read_call(10, 1 << 30, 10).unwrap()).unwrap();
        assert!(verify_read(&r, 10, 1 << 30, 10, &*p).is_err());
        let r = s.handle(&echo_call(11, 6001).unwrap()).unwrap();
        verify_echo(&r, 11, 6001, &*p).unwrap();
        let r = s.handle(&null_call(12).unwrap()).unwrap();
        check_reply_header(&r, 12).unwrap();
        assert_eq!(s.stats.mismatches, 0);
    }

    #[test]
    fn server_counts_mismatched_write_bytes() {
        let p = arena();
        let mut s = Server::new(p.clone());
        // Data of offset 0 sent as offset 8 -> different pattern words.
        let mut call = write_call(&p, 1, 0, 64).unwrap();
        call.copyback(CALL_HEADER_LEN + 4, &8u32.to_be_bytes())
            .unwrap();
        let r = s.handle(&call).unwrap();
        let (st, bad, _) = write_result(&r, 1).unwrap();
        assert_eq!(st, STATUS_MISMATCH);
        assert!(bad > 0);
        assert_eq!(s.stats.mismatches, u64::from(bad));
        let junk = Chain::from_bytes(&[0u8; 12]).unwrap();
        assert!(check_reply_header(&s.handle(&junk).unwrap(), 0).is_err());
    }
}
