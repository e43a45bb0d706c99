//! Helpers for tests: this crate's own (unit and integration) and those of crates built on
//! it. Compiled only for this crate's unit tests and with the `testing` feature, which only
//! dev-dependencies turn on: never in the kernel or any production build.

use alloc::sync::Arc;
use alloc::vec::Vec;

use crate::{HeapPageArena, PageProvider, PAGE_SIZE};

/// A fresh arena of `n` pages, and the same arena as a provider.
///
/// # Panics
/// If the arena cannot be created.
#[allow(clippy::unwrap_used)]
pub fn arena(n: usize) -> (Arc<HeapPageArena>, Arc<dyn PageProvider>) {
    let a = Arc::new(HeapPageArena::new(n).unwrap());
    let p: Arc<dyn PageProvider> = a.clone();
    (a, p)
}

/// `n` bytes of a pattern determined by `seed` (different for different seeds, and not
/// repeating every 256 bytes).
pub fn pattern(seed: u8, n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| {
            (i as u8)
                .wrapping_mul(31)
                .wrapping_add(seed)
                .wrapping_add((i >> 8) as u8)
        })
        .collect()
}

/// A fresh page of `p` for each of `contents` (`PAGE_SIZE` bytes each), holding it; their
/// addresses in order. `None`, with every page taken released again, if `p` runs out.
///
/// # Panics
/// If a fresh page cannot be written, or a content is not `PAGE_SIZE` bytes.
#[allow(clippy::unwrap_used)]
pub fn filled_pages(p: &dyn PageProvider, contents: &[Vec<u8>]) -> Option<Vec<u64>> {
    let mut addrs = Vec::with_capacity(contents.len());
    for content in contents {
        let Ok(a) = p.alloc_page() else {
            for a in addrs {
                p.page_unref(a);
            }
            return None;
        };
        p.with_page_mut(a, &mut |pg| pg.copy_from_slice(content))
            .unwrap();
        addrs.push(a);
    }
    Some(addrs)
}

/// The bytes a page mbuf over pages holding `contents` holds: from `first_off` in the first
/// page, whole pages between, `last_len` bytes of the last page counted from its first data
/// byte (`Mbuf::pages`'s arguments).
///
/// # Panics
/// If the offsets do not fit the pages.
#[allow(clippy::indexing_slicing)]
pub fn page_bytes(contents: &[Vec<u8>], first_off: usize, last_len: usize) -> Vec<u8> {
    let mut expect = Vec::new();
    for (i, content) in contents.iter().enumerate() {
        let start = if i == 0 { first_off } else { 0 };
        let len = if i + 1 == contents.len() {
            last_len
        } else {
            PAGE_SIZE - start
        };
        expect.extend_from_slice(&content[start..start + len]);
    }
    expect
}
