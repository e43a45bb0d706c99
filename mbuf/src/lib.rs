//! FreeBSD-style mbuf chains for the krpc-rdma transport (`no_std` + `alloc`, no `unsafe`).
//!
//! A [`Chain`] is the Rust form of an `m_next`-linked mbuf chain: the currency between the NFS
//! glue, the RPC-over-RDMA core and the providers. It owns a sequence of [`Mbuf`]s, each of one
//! of three kinds ([`MbufKind`]):
//!
//! * **internal** — an inline `[u8; MLEN]` array ([`MLEN`] = 224, like FreeBSD) with a data
//!   offset and length, so leading space makes prepending cheap;
//! * **cluster** — an owned heap buffer of [`MCLBYTES`] (2048) or a caller-chosen size up to
//!   [`MAX_CLUSTER`] (64 KiB, "jumbo"), allocated with `Vec::try_reserve_exact` so that
//!   allocation failure is an error value ([`MbufError::Alloc`]), never an abort;
//! * **page mbuf** (`M_EXTPG`) — an inline array of up to [`MAX_PGS_PER_MBUF`] (16) page
//!   addresses (`u64`: physical, DMA or iova, the provider decides) with `first_off`
//!   (`m_epg_1st_off`), `last_len` (`m_epg_last_len`), and optional inline header (≤
//!   [`MAX_EPG_HDR`] = 24 bytes, `m_epg_hdr`) and trailer (≤ [`MAX_EPG_TRL`] = 64 bytes,
//!   `m_epg_trl`) bytes. The only page size is [`PAGE_SIZE`] = 4096.
//!
//! # Page mbuf layout
//!
//! Bytes of a page mbuf, in order: header, page data, trailer. Page data follows FreeBSD's
//! `m_epg_pagelen()`: page 0 holds bytes from `first_off`; the last page holds `last_len` bytes
//! counted from its first data byte (so a *single* page holds `first_off..first_off +
//! last_len`); pages in between are full. Hence
//!
//! * one page: page bytes = `last_len`;
//! * `n >= 2` pages: page bytes = `(PAGE_SIZE - first_off) + (n - 2) * PAGE_SIZE + last_len`;
//! * length = header + page bytes + trailer.
//!
//! Invariants (every constructor validates, every operation preserves, and
//! [`Chain::check_invariants`] checks): `1 <= n <= 16`, `first_off < PAGE_SIZE`,
//! `1 <= last_len <= PAGE_SIZE`, and for `n == 1`, `first_off + last_len <= PAGE_SIZE`. So a
//! page mbuf always has at least one page and at least one byte of page data: operations that
//! would leave zero page bytes drop the page mbuf, and a piece that would be only header or
//! trailer bytes becomes an internal mbuf.
//!
//! # Ownership and reference counts
//!
//! Pages belong to a [`PageProvider`] that counts references per page (like wired
//! `vm_page`s): there is no per-mbuf `Arc` or refcount allocation. **Each page mbuf holds one
//! reference on each page of its array.** Concretely:
//!
//! * [`Mbuf::pages`] takes over one reference per page from the caller (on success);
//!   [`Chain::alloc_pages`] allocates pages (one reference each) and hands them to new page
//!   mbufs;
//! * splitting inside a page (so both sides hold part of it) takes one extra reference with
//!   [`PageProvider::page_ref`]; splitting on a page boundary moves references;
//! * [`Chain::copym`] shares pages: each page mbuf of the copy takes one more reference
//!   ([`PageProvider::page_ref`]) on each page it holds, and is flagged `RDONLY`;
//! * trimming ([`Chain::adj`], [`Chain::pullup`]) releases the pages that no longer hold data;
//! * dropping a page mbuf (dropping or [`Chain::clear`]ing its chain) calls
//!   [`PageProvider::page_unref`] once per page; the provider frees a page at zero.
//!
//! Page mbufs carry their provider as an `Arc<dyn PageProvider>` created once by the caller;
//! cloning it allocates nothing. [`HeapPageArena`] is a heap-backed provider with statistics
//! for tests and the userspace harness (`in_use() == 0` after dropping everything = no leak).
//!
//! # Flags
//!
//! [`MbufFlags`] holds `PKTHDR`, `EOR`, `RDONLY`, `EXTPG` (derived from the kind) and `PROTO1`
//! whose documented alias [`MbufFlags::DDP_START`] marks the start of a DDP region.
//! `RDONLY` mbufs are never written: [`Chain::copyback`] fails with [`MbufError::ReadOnly`] and
//! prepend/append/pullup never use their spare space. DDP markers never get bytes either.
//!
//! **Packet header.** There is no `m_pkthdr` structure: the chain keeps its length itself
//! (`m_pkthdr.len`, so [`Chain::len`] does not walk the mbufs, except after
//! [`Chain::mbufs_mut`], which may change an mbuf's length); the `PKTHDR` flag is kept only on
//! the first mbuf: operations that replace the first mbuf move it
//! (prepend, pullup, head trim), [`Chain::split`] gives it to both parts, [`Chain::cat`] and
//! [`Chain::append_mbuf`] clear it on the appended mbufs.
//!
//! # DDP regions
//!
//! Following Macklem's plan, an NFS WRITE call (or READ reply) is: XDR mbufs, then a
//! zero-length marker mbuf flagged `DDP_START` ([`Mbuf::ddp_marker`]), then page mbufs holding
//! the data, then trailing XDR. **The DDP region of a marker is the maximal run of page mbufs
//! immediately following that marker mbuf; it ends at the first non-page mbuf or the end of the
//! chain; the marker itself carries no bytes; XDR roundup padding is not part of the region.**
//! [`Chain::ddp_regions`] yields, per marker (several are allowed), the region's chain offset
//! and length; [`Chain::page_fragments_in`] turns a region into page pieces for RDMA.
//! Operations keep markers in place: [`Chain::split`] at a marker's offset puts the marker in
//! the right part (in front of its data); appends/prepends never write into a marker;
//! [`Chain::pullup`] refuses to cross one ([`MbufError::CrossesDdpMarker`]).
//!
//! # Operations and their FreeBSD counterparts
//!
//! | Rust | FreeBSD |
//! |---|---|
//! | [`Chain::len`] | `m_length` |
//! | [`Chain::split`] | `m_split` |
//! | [`Chain::copym`] | `m_copym` (pages shared by reference, copied page mbufs `RDONLY`; other bytes copied) |
//! | [`Chain::copydata`] | `m_copydata` |
//! | [`Chain::copyback`] | `m_copyback` (no zero fill past the end: error) |
//! | [`Chain::pullup`] | `m_pullup` (up to `MCLBYTES`) |
//! | [`Chain::prepend`], [`Chain::prepend_bytes`] | `M_PREPEND` |
//! | [`Chain::append`] | `m_append` |
//! | [`Chain::append_mbuf`] | linking `m_next` of the last mbuf |
//! | [`Chain::adj`] | `m_adj` (emptied mbufs are freed; `abs(n) > len` is an error) |
//! | [`Chain::cat`] | `m_cat` (never compacts) |
//! | [`Chain::clear`], [`Chain::free`], `Drop` | `m_freem` |
//! | [`Mbuf::internal`], [`Mbuf::cluster`], [`Mbuf::cluster_with`] | `m_get`, `m_getcl`, `m_getjcl` |
//! | [`Mbuf::pages`], [`Chain::alloc_pages`] | `mb_alloc_ext_pgs`, `mb_alloc_ext_plus_pages` |
//! | [`Mbuf::leading_space`], [`Mbuf::trailing_space`] | `M_LEADINGSPACE`, `M_TRAILINGSPACE` |
//! | [`Chain::fragments`] | walking `m_next` with `mtod` / `m_epg_pa` |
//!
//! No operation panics on any argument: out-of-range offsets give [`MbufError::OutOfRange`].
//! Unless documented otherwise, a failed operation leaves the chain unchanged.

#![cfg_attr(not(test), no_std)]
#![forbid(unsafe_code)]

extern crate alloc;

mod arena;
mod chain;
mod ddp;
mod error;
mod flags;
mod mbuf;
mod page;
mod pool;

pub use arena::{HeapPageArena, DEFAULT_ARENA_BASE};
pub use chain::{Chain, Fragments, PageFragment};
pub use ddp::{DdpRegion, DdpRegions};
pub use error::{AllocError, MbufError, PageError};
pub use flags::MbufFlags;
pub use mbuf::{Fragment, Mbuf, MbufFragments, MbufKind, PageInfo, MAX_CLUSTER, MCLBYTES, MLEN};
pub use page::{
    changed_runs, edit_page_by_copy, page_range_end, PageProvider, MAX_EPG_HDR, MAX_EPG_TRL,
    MAX_PGS_PER_MBUF, PAGE_SIZE,
};
pub use pool::ChainPool;

#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(test)]
mod tests;
