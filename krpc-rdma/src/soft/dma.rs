//! The "NIC's DMA engine": byte copies between page fragments and buffers.
//!
//! An RDMA Read or Write is the one copy a software provider must make: from the source
//! pages ([`PageProvider::read_page`]) to the sink pages ([`PageProvider::write_page`]). Both
//! sides may use the same page provider, whose calls must not nest (the provider may hold a
//! lock while it copies), so every piece goes through a bounce buffer owned by the fabric:
//! read the source piece into it, then write it to the sink.

use mbuf::{PageFragment, PageProvider};

/// Which end of a copy failed (a page that cannot be mapped).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DmaError {
    /// The source pages.
    Source,
    /// The sink pages.
    Sink,
}

/// A position inside an ordered list of fragments.
struct Cursor<'a> {
    frags: &'a [PageFragment],
    idx: usize,
    off: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at byte `skip` of the concatenated fragments.
    fn new(frags: &'a [PageFragment], skip: u64) -> Self {
        let mut c = Cursor {
            frags,
            idx: 0,
            off: 0,
        };
        let mut left = skip;
        while let Some(f) = c.frags.get(c.idx) {
            let len = f.len as u64;
            if left < len {
                // `left < len <= PAGE_SIZE` fits in usize.
                c.off = usize::try_from(left).unwrap_or(0);
                break;
            }
            left -= len;
            c.idx += 1;
        }
        c
    }

    /// The current piece: page address, in-page offset, bytes left in this fragment.
    fn piece(&mut self) -> Option<(u64, usize, usize)> {
        loop {
            let f = self.frags.get(self.idx)?;
            if self.off < f.len {
                return Some((f.addr, f.offset + self.off, f.len - self.off));
            }
            self.idx += 1;
            self.off = 0;
        }
    }

    fn advance(&mut self, n: usize) {
        self.off += n;
    }
}

/// Copy `len` bytes from byte `src_skip` of `src` (pages of `src_pages`) to byte `dst_skip`
/// of `dst` (pages of `dst_pages`) through `bounce`.
///
/// The caller has checked that both fragment lists hold the range.
#[allow(clippy::too_many_arguments)]
pub(crate) fn copy_pages(
    src_pages: &dyn PageProvider,
    src: &[PageFragment],
    src_skip: u64,
    dst_pages: &dyn PageProvider,
    dst: &[PageFragment],
    dst_skip: u64,
    len: u64,
    bounce: &mut [u8],
) -> Result<(), DmaError> {
    let mut s = Cursor::new(src, src_skip);
    let mut d = Cursor::new(dst, dst_skip);
    let mut left = len;
    while left > 0 {
        let (sa, so, sl) = s.piece().ok_or(DmaError::Source)?;
        let (da, doff, dl) = d.piece().ok_or(DmaError::Sink)?;
        let left_usize = usize::try_from(left).unwrap_or(usize::MAX);
        let n = sl.min(dl).min(left_usize).min(bounce.len());
        if n == 0 {
            return Err(DmaError::Sink);
        }
        let bounce = bounce.get_mut(..n).ok_or(DmaError::Sink)?;
        src_pages
            .read_page(sa, so, bounce)
            .map_err(|_| DmaError::Source)?;
        dst_pages
            .write_page(da, doff, bounce)
            .map_err(|_| DmaError::Sink)?;
        s.advance(n);
        d.advance(n);
        left -= n as u64;
    }
    Ok(())
}

/// Gather the bytes of `frags` (pages of `pages`) into `out`, whose length is their total.
pub(crate) fn gather(
    pages: &dyn PageProvider,
    frags: &[PageFragment],
    out: &mut [u8],
) -> Result<(), DmaError> {
    let mut done = 0usize;
    for f in frags {
        if f.len == 0 {
            continue;
        }
        let to = out.get_mut(done..done + f.len).ok_or(DmaError::Sink)?;
        pages
            .read_page(f.addr, f.offset, to)
            .map_err(|_| DmaError::Source)?;
        done += f.len;
    }
    Ok(())
}
