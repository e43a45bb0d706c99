//! DDP (direct data placement) regions: marker mbuf + run of page mbufs.
//!
//! The DDP region of a marker (an mbuf flagged [`MbufFlags::DDP_START`](crate::MbufFlags::DDP_START),
//! normally the zero-length [`Mbuf::ddp_marker`](crate::Mbuf::ddp_marker)) is the maximal run
//! of page mbufs immediately following that marker mbuf; it ends at the first non-page mbuf or
//! at the end of the chain. The marker itself carries no bytes. XDR roundup padding is not part
//! of the region (it lives in the following XDR mbufs). Its offset is the chain offset right
//! after the marker, its length the sum of the lengths of those page mbufs (including their
//! inline header/trailer bytes, if any: DDP builders should not set any).

use core::ops::Range;

use crate::chain::{Chain, PageFragment};
use crate::error::MbufError;
use crate::mbuf::Fragment;

impl Chain {
    /// The page pieces covering exactly `range`, which must consist of page data only (e.g.
    /// a DDP region from [`Chain::ddp_regions`]); for RDMA registration/SGE building.
    ///
    /// # Errors
    /// [`MbufError::OutOfRange`]; [`MbufError::NotPageData`] if a byte of `range` is mapped
    /// data (internal, cluster, page header or trailer).
    pub fn page_fragments_in(
        &self,
        range: Range<usize>,
    ) -> Result<impl Iterator<Item = PageFragment> + '_, MbufError> {
        if self
            .fragments_in(range.clone())?
            .any(|f| matches!(f, Fragment::Bytes(_)))
        {
            return Err(MbufError::NotPageData);
        }
        Ok(self.fragments_in(range)?.filter_map(|f| match f {
            Fragment::Page { addr, offset, len } => Some(PageFragment { addr, offset, len }),
            Fragment::Bytes(_) => None,
        }))
    }

    /// The DDP regions of the chain, one per marker mbuf (an mbuf flagged
    /// [`MbufFlags::DDP_START`](crate::MbufFlags::DDP_START)), in order. See the crate docs for the definition.
    pub fn ddp_regions(&self) -> DdpRegions<'_> {
        DdpRegions {
            chain: self,
            idx: 0,
            pos: 0,
        }
    }
}

/// One DDP region (see the crate docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DdpRegion {
    /// Index of the marker mbuf in the chain.
    pub marker_index: usize,
    /// Chain offset of the first byte after the marker (the region start).
    pub offset: usize,
    /// Bytes in the region: the total length of the page mbufs that immediately follow the
    /// marker (0 if none do).
    pub len: usize,
    /// Number of those page mbufs.
    pub page_mbufs: usize,
}

impl DdpRegion {
    /// The region as a byte range of the chain.
    pub fn range(&self) -> Range<usize> {
        self.offset..self.offset + self.len
    }
}

/// Iterator over a chain's DDP regions (see [`Chain::ddp_regions`]).
pub struct DdpRegions<'a> {
    chain: &'a Chain,
    idx: usize,
    pos: usize,
}

impl Iterator for DdpRegions<'_> {
    type Item = DdpRegion;
    fn next(&mut self) -> Option<DdpRegion> {
        loop {
            let m = self.chain.mbufs.get(self.idx)?;
            let marker_index = self.idx;
            self.idx += 1;
            self.pos += m.len();
            if !m.is_ddp_marker() {
                continue;
            }
            let offset = self.pos;
            let (mut len, mut page_mbufs) = (0, 0);
            for p in self.chain.mbufs.iter().skip(self.idx) {
                if !p.is_pages() {
                    break;
                }
                len += p.len();
                page_mbufs += 1;
            }
            return Some(DdpRegion {
                marker_index,
                offset,
                len,
                page_mbufs,
            });
        }
    }
}
