//! Error types of the crate.

use core::fmt;

/// Memory (heap or page) could not be allocated.
///
/// Returned by [`PageProvider::alloc_page`](crate::PageProvider::alloc_page) when the provider
/// is exhausted, and converted into [`MbufError::Alloc`] by the chain operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AllocError;

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("allocation failed")
    }
}

/// A page provider refused an operation on one page.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PageError {
    /// The address does not name a page of this provider (or is not page aligned).
    UnknownPage(u64),
    /// The page belongs to the provider but holds no reference (it is free).
    NotInUse(u64),
    /// The page's reference count would overflow.
    RefOverflow(u64),
    /// The page could not be mapped (or the mapping was shorter than `PAGE_SIZE`).
    Unmappable(u64),
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PageError::UnknownPage(a) => write!(f, "unknown page {a:#x}"),
            PageError::NotInUse(a) => write!(f, "page {a:#x} is not in use"),
            PageError::RefOverflow(a) => write!(f, "reference count of page {a:#x} overflows"),
            PageError::Unmappable(a) => write!(f, "page {a:#x} cannot be mapped"),
        }
    }
}

/// Error of an mbuf or chain operation.
///
/// Unless documented otherwise on the operation, a failed operation leaves the chain exactly as
/// it was (same bytes, same mbufs, same page references).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MbufError {
    /// Heap growth, a cluster, or a page could not be allocated.
    Alloc,
    /// The byte range `[off, off + len)` is not inside the chain (or mbuf) of length
    /// `avail`.
    OutOfRange {
        /// Requested start offset.
        off: usize,
        /// Requested length.
        len: usize,
        /// Bytes actually available.
        avail: usize,
    },
    /// A size exceeds the limit of the requested kind of storage.
    TooLarge {
        /// Requested size.
        requested: usize,
        /// The limit.
        limit: usize,
    },
    /// The operation would write into an mbuf flagged [`RDONLY`](crate::MbufFlags::RDONLY).
    ReadOnly,
    /// Page mbuf parameters violate an invariant (the string says which).
    InvalidPages(&'static str),
    /// The operation needs a page mbuf and the mbuf is not one.
    NotPageMbuf,
    /// [`Chain::pullup`](crate::Chain::pullup) would have to move bytes across a DDP marker.
    CrossesDdpMarker,
    /// [`Chain::page_fragments_in`](crate::Chain::page_fragments_in) was asked for a range
    /// containing bytes that are not page data.
    NotPageData,
    /// The page provider refused an operation.
    Page(PageError),
}

impl MbufError {
    pub(crate) const fn range(off: usize, len: usize, avail: usize) -> Self {
        MbufError::OutOfRange { off, len, avail }
    }
}

impl fmt::Display for MbufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MbufError::Alloc => f.write_str("allocation failed"),
            MbufError::OutOfRange { off, len, avail } => {
                write!(f, "range {off}+{len} outside {avail} bytes")
            }
            MbufError::TooLarge { requested, limit } => {
                write!(f, "size {requested} exceeds limit {limit}")
            }
            MbufError::ReadOnly => f.write_str("mbuf is read-only"),
            MbufError::InvalidPages(why) => write!(f, "invalid page mbuf: {why}"),
            MbufError::NotPageMbuf => f.write_str("not a page mbuf"),
            MbufError::CrossesDdpMarker => f.write_str("operation crosses a DDP marker"),
            MbufError::NotPageData => f.write_str("range contains non-page bytes"),
            MbufError::Page(e) => write!(f, "page provider: {e}"),
        }
    }
}

impl From<AllocError> for MbufError {
    fn from(_: AllocError) -> Self {
        MbufError::Alloc
    }
}

impl From<PageError> for MbufError {
    fn from(e: PageError) -> Self {
        MbufError::Page(e)
    }
}

impl From<alloc::collections::TryReserveError> for MbufError {
    fn from(_: alloc::collections::TryReserveError) -> Self {
        MbufError::Alloc
    }
}
