//! File bytes in and out of a session's pages, shared by the NFS clients: a local file read
//! into fresh DDP pages (a WRITE's data), and a reply's data range (a READ's, the write
//! chunk's pages and any inline bytes) written to a local file; progress lines of a long
//! transfer.

use std::fs::File;
use std::io::Write;
use std::ops::Range;
use std::time::{Duration, Instant};

use mbuf::{Chain, Fragment, PageFragment};

use crate::dialer::Dialer;

/// The next `n` bytes of `f` in fresh pages of `dialer`, read by [`Dialer::read_file`] (the
/// libibverbs arena's `readv` straight into them: no copy in userspace, as the kernel
/// client's O_DIRECT WRITE DMAs from user pages). `what` names the file in errors.
///
/// # Errors
/// No pages, a read error, the file shorter than `n`.
pub(crate) fn file_pages<D: Dialer>(
    dialer: &D,
    f: &File,
    n: usize,
    what: &str,
) -> Result<Chain, String> {
    let pages =
        Chain::alloc_pages(dialer.pages(), n).map_err(|e| format!("page allocation: {e}"))?;
    let frags: Vec<PageFragment> = pages
        .fragments()
        .filter_map(|fr| match fr {
            Fragment::Page { addr, offset, len } => Some(PageFragment { addr, offset, len }),
            Fragment::Bytes(_) => None,
        })
        .collect();
    let got = dialer
        .read_file(f, &frags)
        .map_err(|e| format!("reading {what}: {e}"))?;
    if got != n {
        return Err(format!(
            "reading {what}: the file shrank ({got} of {n} bytes)"
        ));
    }
    Ok(pages)
}

/// Write bytes `range` of `reply` at `f`'s position: inline bytes as they are, runs of page
/// fragments (a write chunk's pages) through [`Dialer::write_file`] (the arena's `writev`:
/// no copy in userspace, as the kernel client's O_DIRECT READ lands in the user's pages).
/// `what` names the file in errors.
///
/// # Errors
/// The range is not in the reply; a write error.
pub(crate) fn data_to_file<D: Dialer>(
    dialer: &D,
    reply: &Chain,
    range: Range<usize>,
    f: &mut File,
    what: &str,
) -> Result<(), String> {
    let frags = reply
        .fragments_in(range)
        .map_err(|e| format!("READ data: {e}"))?;
    let write_err = |e: std::io::Error| format!("writing {what}: {e}");
    let mut run: Vec<PageFragment> = Vec::new();
    for fr in frags {
        match fr {
            Fragment::Page { addr, offset, len } => {
                run.push(PageFragment { addr, offset, len });
            }
            Fragment::Bytes(b) => {
                if !run.is_empty() {
                    dialer.write_file(f, &run).map_err(write_err)?;
                    run.clear();
                }
                f.write_all(b).map_err(write_err)?;
            }
        }
    }
    if !run.is_empty() {
        dialer.write_file(f, &run).map_err(write_err)?;
    }
    Ok(())
}

/// Once-a-second progress lines on stderr.
pub(crate) struct Progress {
    on: bool,
    what: &'static str,
    total: u64,
    last: Instant,
    printed: bool,
}

impl Progress {
    pub(crate) fn new(on: bool, what: &'static str, total: u64) -> Self {
        Progress {
            on,
            what,
            total,
            last: Instant::now(),
            printed: false,
        }
    }

    pub(crate) fn tick(&mut self, done: u64, start: Instant) {
        if self.on && self.last.elapsed() >= Duration::from_secs(1) {
            self.last = Instant::now();
            self.printed = true;
            let secs = start.elapsed().as_secs_f64();
            eprintln!(
                "{}: {} of {} bytes ({:.1} MB/s)",
                self.what,
                done,
                self.total,
                done as f64 / secs.max(1e-9) / 1e6
            );
        }
    }

    pub(crate) fn done(&self) {}
}
