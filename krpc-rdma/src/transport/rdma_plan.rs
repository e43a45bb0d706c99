//! Planning RDMA Read / RDMA Write work requests: local page fragments mapped onto the
//! segments of a chunk, at most `max_sge` fragments per work request.

use alloc::vec::Vec;
use core::ops::Range;

use mbuf::PageFragment;

use super::error::CallError;
use crate::wire::Segment;

/// One planned RDMA work request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrDesc {
    /// Its local fragments: a range of the `pieces` vector the plan filled.
    pub pieces: Range<usize>,
    /// Remote handle.
    pub handle: u32,
    /// Remote offset.
    pub offset: u64,
    /// Bytes.
    pub len: u32,
}

/// Map `local` (in order) onto the segments of `remote` (in order), filling segments one after
/// the other. Appends the work requests to `wrs` and their fragments to `pieces` (neither is
/// grown past its capacity). Returns the bytes mapped; segments are filled in order, so the
/// bytes that land in each one follow from it (RFC 8166 §3.4.6: the responder reports bytes
/// actually written; the reply header echoes them through `written_segments`).
///
/// # Errors
/// [`CallError::TooLarge`] when `local` does not fit in `remote` or a vector is full.
pub fn plan<R>(
    local: &[PageFragment],
    remote: R,
    max_sge: usize,
    pieces: &mut Vec<PageFragment>,
    wrs: &mut Vec<WrDesc>,
) -> Result<usize, CallError>
where
    R: IntoIterator<Item = Segment>,
{
    let max_sge = max_sge.max(1);
    let mut idx = 0usize;
    let mut off = 0usize;
    let mut left: usize = local.iter().map(|f| f.len).sum();
    let mut written = 0usize;
    for seg in remote {
        let mut remaining = (seg.length as usize).min(left);
        let mut seg_done = 0usize;
        while remaining > 0 {
            let start = pieces.len();
            let mut wr_len = 0usize;
            while remaining > 0 && pieces.len() - start < max_sge {
                let Some(f) = local.get(idx) else {
                    return Err(CallError::TooLarge);
                };
                let n = (f.len - off).min(remaining);
                if pieces.len() >= pieces.capacity() {
                    return Err(CallError::TooLarge);
                }
                pieces.push(PageFragment {
                    addr: f.addr,
                    offset: f.offset + off,
                    len: n,
                });
                off += n;
                if off == f.len {
                    idx += 1;
                    off = 0;
                }
                remaining -= n;
                wr_len += n;
            }
            if wrs.len() >= wrs.capacity() {
                return Err(CallError::TooLarge);
            }
            wrs.push(WrDesc {
                pieces: start..pieces.len(),
                handle: seg.handle,
                // A peer's 64-bit offset: checked, never wrapped.
                offset: seg
                    .offset
                    .checked_add(seg_done as u64)
                    .ok_or(CallError::TooLarge)?,
                len: u32::try_from(wr_len).map_err(|_| CallError::TooLarge)?,
            });
            seg_done += wr_len;
        }
        left -= seg_done;
        written += seg_done;
    }
    if left > 0 {
        return Err(CallError::TooLarge);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_by_segment_and_sge() {
        let local = [
            PageFragment {
                addr: 0x1000,
                offset: 100,
                len: 3996,
            },
            PageFragment {
                addr: 0x5000,
                offset: 0,
                len: 4096,
            },
            PageFragment {
                addr: 0x9000,
                offset: 0,
                len: 10,
            },
        ];
        let remote = [
            Segment {
                handle: 1,
                length: 5000,
                offset: 0,
            },
            Segment {
                handle: 2,
                length: 8192,
                offset: 64,
            },
        ];
        let mut pieces = Vec::with_capacity(16);
        let mut wrs = Vec::with_capacity(16);
        let w = plan(&local, remote, 1, &mut pieces, &mut wrs).unwrap();
        assert_eq!(w, 3996 + 4096 + 10);
        // Segment 1 takes its 5000 bytes, segment 2 the rest.
        let to = |h| -> u32 { wrs.iter().filter(|d| d.handle == h).map(|d| d.len).sum() };
        assert_eq!(to(1), 5000);
        assert_eq!(to(2), 3996 + 4096 + 10 - 5000);
        assert!(wrs.iter().all(|d| d.pieces.len() == 1));
        assert_eq!(wrs.iter().map(|d| d.len as usize).sum::<usize>(), 8102);
        assert_eq!(wrs[2].handle, 2);
        assert_eq!(wrs[2].offset, 64);
        let mut pieces = Vec::with_capacity(16);
        let mut wrs = Vec::with_capacity(16);
        let small = [Segment {
            handle: 1,
            length: 10,
            offset: 0,
        }];
        assert_eq!(
            plan(&local, small, 4, &mut pieces, &mut wrs),
            Err(CallError::TooLarge)
        );
    }
}
