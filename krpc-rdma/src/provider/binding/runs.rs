//! Which fragments one registration can cover: the FRWR page-run rule, written once.
//!
//! A kernel fast-registration MR (FRWR, `ib_map_mr_sg`) maps a list of pages into one
//! gap-free iova range: every page but the first must start at offset 0 and every page but the
//! last must end at the page end. A userspace registration (a memory window or an MR over the
//! arena) covers one contiguous *virtual* range instead. The requester uses [`continues`] to
//! cut its fragments into registrations, the soft provider checks [`check_frwr`], and the
//! verbs bindings split a registration into per-key runs with [`runs`].

use mbuf::{PageFragment, PAGE_SIZE};

use super::Sge;
use crate::provider::ProviderError;
use crate::wire::MAX_CHUNK_SEGMENTS;

/// How a binding's registration key (MR, memory window) covers memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunRule {
    /// A kernel FRWR: page lists, gap-free at page boundaries, at most `max_pages` pages per
    /// key. SGE addresses are page addresses plus the in-page offset.
    Frwr {
        /// Pages one key maps at most.
        max_pages: u32,
    },
    /// One contiguous address range per key (userspace windows and MRs over virtual memory).
    Contiguous,
}

/// Whether `next` continues `prev` without a gap in one FRWR iova range: `prev` ends at its
/// page's end and `next` starts at offset 0 of its page.
pub fn continues(prev: &PageFragment, next: &PageFragment) -> bool {
    next.offset == 0 && prev.offset.checked_add(prev.len) == Some(PAGE_SIZE)
}

/// Check that `frags` form one FRWR range and return its length: at least one fragment, none
/// empty, each inside its page, each consecutive pair [`continues`], total within `u32`.
///
/// # Errors
/// [`ProviderError::BadFragments`] when a rule is broken.
pub fn check_frwr(frags: &[PageFragment]) -> Result<u32, ProviderError> {
    let mut total: u64 = 0;
    let mut prev: Option<&PageFragment> = None;
    for f in frags {
        let in_page = f.len > 0 && f.offset.checked_add(f.len).is_some_and(|e| e <= PAGE_SIZE);
        if !in_page || prev.is_some_and(|p| !continues(p, f)) {
            return Err(ProviderError::BadFragments);
        }
        total = total.saturating_add(f.len as u64);
        prev = Some(f);
    }
    if prev.is_none() {
        return Err(ProviderError::BadFragments);
    }
    u32::try_from(total).map_err(|_| ProviderError::BadFragments)
}

/// `(start, end)` index ranges of the merged SGE list, one per registration key.
pub type Runs = heapless::Vec<(usize, usize), MAX_CHUNK_SEGMENTS>;

/// Merge `sges` in place (an SGE that continues the previous one in address is folded into
/// it: within one page for [`RunRule::Frwr`], anywhere for [`RunRule::Contiguous`]) and cut
/// the result into runs, one per key. `page_of` gives an SGE's page for the FRWR rule.
///
/// # Errors
/// [`ProviderError::BadFragments`] for an empty list or more than
/// [`MAX_CHUNK_SEGMENTS`] runs.
pub fn runs(sges: &mut alloc::vec::Vec<Sge>, rule: RunRule) -> Result<Runs, ProviderError> {
    let page = |a: u64| a & !(PAGE_SIZE as u64 - 1);
    let mut w = 0usize;
    for r in 0..sges.len() {
        let Some(&s) = sges.get(r) else { break };
        let merged = match (w.checked_sub(1).and_then(|i| sges.get_mut(i)), rule) {
            (Some(last), _) if last.addr.checked_add(u64::from(last.length)) != Some(s.addr) => {
                false
            }
            (Some(last), RunRule::Frwr { .. }) if page(last.addr) != page(s.addr) => false,
            (Some(last), _) => match last.length.checked_add(s.length) {
                Some(n) => {
                    last.length = n;
                    true
                }
                None => false,
            },
            (None, _) => false,
        };
        if !merged {
            if let Some(slot) = sges.get_mut(w) {
                *slot = s;
            }
            w += 1;
        }
    }
    sges.truncate(w);
    let mut out = Runs::new();
    let mut start = 0usize;
    for i in 1..=sges.len() {
        let cut = match (rule, sges.get(i - 1), sges.get(i)) {
            (RunRule::Frwr { max_pages }, Some(p), Some(c)) => {
                let prev_end = (p.addr % PAGE_SIZE as u64) + u64::from(p.length);
                c.addr % PAGE_SIZE as u64 != 0
                    || prev_end != PAGE_SIZE as u64
                    || i - start >= (max_pages as usize).max(1)
            }
            _ => true,
        };
        if cut {
            out.push((start, i))
                .map_err(|_| ProviderError::BadFragments)?;
            start = i;
        }
    }
    if out.is_empty() {
        return Err(ProviderError::BadFragments);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    const P: u64 = PAGE_SIZE as u64;

    fn f(addr: u64, offset: usize, len: usize) -> PageFragment {
        PageFragment { addr, offset, len }
    }

    fn s(addr: u64, length: u32) -> Sge {
        Sge {
            addr,
            length,
            lkey: 0,
        }
    }

    #[test]
    fn continues_needs_page_end_then_page_start() {
        assert!(continues(&f(0, 100, 3996), &f(P * 7, 0, 10)));
        assert!(!continues(&f(0, 100, 3995), &f(P * 7, 0, 10)));
        assert!(!continues(&f(0, 0, 4096), &f(P * 7, 1, 10)));
    }

    #[test]
    fn check_frwr_rules() {
        assert_eq!(check_frwr(&[f(0, 5, 4091), f(P, 0, 7)]), Ok(4098));
        assert_eq!(check_frwr(&[]), Err(ProviderError::BadFragments));
        assert_eq!(check_frwr(&[f(0, 0, 0)]), Err(ProviderError::BadFragments));
        assert_eq!(
            check_frwr(&[f(0, 4000, 97)]),
            Err(ProviderError::BadFragments)
        );
        assert_eq!(
            check_frwr(&[f(0, 0, 10), f(P, 0, 10)]),
            Err(ProviderError::BadFragments)
        );
    }

    #[test]
    fn frwr_runs_split_at_gaps_and_merge_within_a_page() {
        // Two pieces of one page merge; a following full page continues; then a gap.
        let mut v = vec![s(0, 100), s(100, 3996), s(P * 3, 4096), s(P * 9 + 8, 10)];
        let r = runs(&mut v, RunRule::Frwr { max_pages: 64 }).unwrap();
        assert_eq!(v, vec![s(0, 4096), s(P * 3, 4096), s(P * 9 + 8, 10)]);
        assert_eq!(r.as_slice(), &[(0, 2), (2, 3)]);
    }

    #[test]
    fn frwr_runs_respect_max_pages_and_do_not_merge_across_pages() {
        let mut v = vec![s(0, 4096), s(P, 4096), s(P * 2, 4096)];
        let r = runs(&mut v, RunRule::Frwr { max_pages: 2 }).unwrap();
        assert_eq!(v.len(), 3, "FRWR keeps one SGE per page");
        assert_eq!(r.as_slice(), &[(0, 2), (2, 3)]);
    }

    #[test]
    fn contiguous_runs_merge_across_pages() {
        let mut v = vec![s(0, 4096), s(P, 10), s(P * 5, 1)];
        let r = runs(&mut v, RunRule::Contiguous).unwrap();
        assert_eq!(v, vec![s(0, 4106), s(P * 5, 1)]);
        assert_eq!(r.as_slice(), &[(0, 1), (1, 2)]);
    }

    #[test]
    fn too_many_runs_or_none_is_refused() {
        let mut v: alloc::vec::Vec<Sge> = (0..17).map(|i| s(P * 2 * i, 1)).collect();
        assert_eq!(
            runs(&mut v, RunRule::Contiguous),
            Err(ProviderError::BadFragments)
        );
        assert_eq!(
            runs(&mut vec![], RunRule::Contiguous),
            Err(ProviderError::BadFragments)
        );
    }
}
