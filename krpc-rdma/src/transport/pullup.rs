//! Turning chain bytes into page fragments for RDMA: page data is used in place, other bytes
//! are copied ("pulled up") into freshly allocated pages.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::ops::Range;

use mbuf::{Chain, Fragment, Mbuf, PageFragment, PageProvider, PAGE_SIZE};

use super::error::CallError;

/// Result of [`gather`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Gathered {
    /// Bytes covered.
    pub bytes: usize,
    /// Bytes copied into fresh pages.
    pub pulled: usize,
}

/// Append `f` to `frags`, merging with the previous piece when contiguous in one page.
pub(crate) fn push_frag(frags: &mut Vec<PageFragment>, f: PageFragment) -> Result<(), CallError> {
    if let Some(last) = frags.last_mut() {
        if last.addr == f.addr && last.offset + last.len == f.offset {
            last.len += f.len;
            return Ok(());
        }
    }
    if frags.len() >= frags.capacity() {
        return Err(CallError::TooLarge);
    }
    frags.push(f);
    Ok(())
}

/// Describe `ranges` of `chain` as page fragments appended to `frags` (whose capacity is the
/// limit: never grown). Page data is referenced in place; other bytes are copied into pages
/// allocated from `pages`, which are appended to `hold` (as page mbufs) and must be kept alive
/// until the RDMA using them is done.
///
/// # Errors
/// [`CallError::TooLarge`] when `frags` is full, [`CallError::NoMemory`].
pub fn gather<I>(
    chain: &Chain,
    ranges: I,
    pages: &Arc<dyn PageProvider>,
    frags: &mut Vec<PageFragment>,
    hold: &mut Chain,
) -> Result<Gathered, CallError>
where
    I: Iterator<Item = Range<usize>>,
{
    let mut out = Gathered::default();
    // The page being filled: (address, bytes used). Its reference is owned here until closed.
    let mut cur: Option<(u64, usize)> = None;
    let result = (|| {
        for range in ranges {
            for frag in chain.fragments_in(range)? {
                match frag {
                    Fragment::Page { addr, offset, len } => {
                        close(&mut cur, pages, frags, hold)?;
                        push_frag(frags, PageFragment { addr, offset, len })?;
                        out.bytes += len;
                    }
                    Fragment::Bytes(mut bytes) => {
                        while !bytes.is_empty() {
                            let (addr, used) = match cur {
                                Some(c) => c,
                                None => {
                                    let a = pages.alloc_page().map_err(|_| CallError::NoMemory)?;
                                    cur = Some((a, 0));
                                    (a, 0)
                                }
                            };
                            let n = bytes.len().min(PAGE_SIZE - used);
                            let (now, rest) = bytes.split_at(n);
                            pages
                                .write_page(addr, used, now)
                                .map_err(|_| CallError::NoMemory)?;
                            cur = Some((addr, used + n));
                            out.bytes += n;
                            out.pulled += n;
                            bytes = rest;
                            if used + n == PAGE_SIZE {
                                close(&mut cur, pages, frags, hold)?;
                            }
                        }
                    }
                }
            }
        }
        close(&mut cur, pages, frags, hold)
    })();
    if result.is_err() {
        // Keep the reference owned by `hold` so the caller's cleanup frees it.
        let _ = close(&mut cur, pages, frags, hold);
    }
    result.map(|()| out)
}

/// Finish the page being filled: hand its reference to `hold` and describe its bytes.
fn close(
    cur: &mut Option<(u64, usize)>,
    pages: &Arc<dyn PageProvider>,
    frags: &mut Vec<PageFragment>,
    hold: &mut Chain,
) -> Result<(), CallError> {
    let Some((addr, used)) = cur.take() else {
        return Ok(());
    };
    if used == 0 {
        pages.page_unref(addr);
        return Ok(());
    }
    match Mbuf::pages(Arc::clone(pages), &[addr], 0, used) {
        Ok(m) => hold.append_mbuf(m)?,
        Err(_) => {
            pages.page_unref(addr);
            return Err(CallError::NoMemory);
        }
    }
    push_frag(
        frags,
        PageFragment {
            addr,
            offset: 0,
            len: used,
        },
    )
}
