//! [`Dialer`]: what a client session needs from a provider — a connection factory.
//!
//! A session makes its first connection and every reconnection through its dialer, waits
//! for completions through it, and takes the pages of every call (DDP data, write chunks)
//! from the dialer's one page provider, so calls kept for retransmission keep their pages
//! across a reconnect. The libibverbs provider (`userspace-harness`'s `VerbsDialer`: an
//! rdma_cm connect over a registered arena) is one implementation; the host tests dial the
//! software provider (`krpc_rdma::soft`) with an in-process server.

use std::fmt;
use std::fs::File;
use std::io::{self, Read, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use krpc_rdma::provider::{Provider, Resources};
use mbuf::{PageFragment, PageProvider, PAGE_SIZE};

use crate::error::RunError;

/// A factory of connections to one server.
pub trait Dialer {
    /// The queue pair of one connection.
    type Qp: Provider;

    /// The server, for messages (e.g. `10.0.2.15:20049`).
    fn peer(&self) -> &str;

    /// The page provider of every connection's requester: DDP pages of calls and write
    /// chunks come from it. One for every connection the dialer makes.
    fn pages(&self) -> &Arc<dyn PageProvider>;

    /// What a queue pair of this dialer offers (for the requester's sizing).
    fn resources(&self) -> Resources;

    /// A new queue pair to the server, carrying `private_data` (RFC 8797) in the connection
    /// exchange. The connection need not be established yet: the requester reports that.
    ///
    /// # Errors
    /// The server refused or cannot be reached; no device; the message is one line.
    fn dial(&mut self, private_data: &[u8]) -> Result<Self::Qp, RunError>;

    /// Block until `qp` may have completions or connection events to poll, or `timeout`
    /// passed. May return early (spuriously) at any time.
    fn wait(&mut self, qp: &mut Self::Qp, timeout: Duration);

    /// One line for the user (stderr): reconnections, data sent again.
    fn note(&self, line: fmt::Arguments<'_>) {
        eprintln!("krpc-rdma-session: {line}");
    }

    /// The clock of reconnection backoff, give-up times and retry delays: the monotonic
    /// clock by default. A test dialer gives a virtual one (with [`Dialer::sleep`]), so that
    /// a give-up after two minutes is tested without waiting two minutes.
    fn now(&self) -> Instant {
        Instant::now()
    }

    /// Sleep for `d` (a backoff between connection attempts, a retry delay). Default:
    /// [`std::thread::sleep`].
    fn sleep(&mut self, d: Duration) {
        std::thread::sleep(d);
    }

    /// Fill `frags` (pieces of pages of [`Dialer::pages`], in order) from `f` at its current
    /// position; returns the bytes read, fewer only at end of file. The default copies
    /// through a bounce buffer and [`PageProvider::write_page`]; a provider whose pages are
    /// plain memory reads straight into them (the libibverbs arena's `readv`).
    ///
    /// # Errors
    /// The read failed, or a fragment is not a page of this provider.
    fn read_file(&self, f: &File, frags: &[PageFragment]) -> io::Result<usize> {
        let mut bounce = [0u8; PAGE_SIZE];
        let mut src = f;
        let mut done = 0usize;
        for fr in frags {
            let mut got = 0usize;
            let buf = bounce.get_mut(..fr.len).ok_or_else(|| fragment_error(fr))?;
            while got < fr.len {
                let rest = buf.get_mut(got..).ok_or_else(|| fragment_error(fr))?;
                match src.read(rest) {
                    Ok(0) => break,
                    Ok(n) => got += n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            let part = buf.get(..got).ok_or_else(|| fragment_error(fr))?;
            self.pages()
                .write_page(fr.addr, fr.offset, part)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{e:?}")))?;
            done += got;
            if got < fr.len {
                break;
            }
        }
        Ok(done)
    }

    /// Write the bytes of `frags` (pieces of pages of [`Dialer::pages`] the caller owns: no
    /// RDMA operation targets them any more) to `f` at its current position; returns the
    /// bytes written. The default copies through [`PageProvider::read_page`]; the libibverbs
    /// arena overrides it with one `writev`.
    ///
    /// # Errors
    /// The write failed, or a fragment is not a page of this provider.
    fn write_file(&self, f: &File, frags: &[PageFragment]) -> io::Result<usize> {
        let mut bounce = [0u8; PAGE_SIZE];
        let mut dst = f;
        let mut done = 0usize;
        for fr in frags {
            let buf = bounce.get_mut(..fr.len).ok_or_else(|| fragment_error(fr))?;
            self.pages()
                .read_page(fr.addr, fr.offset, buf)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{e:?}")))?;
            dst.write_all(buf)?;
            done += fr.len;
        }
        Ok(done)
    }
}

fn fragment_error(fr: &PageFragment) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "page fragment {:#x}+{} of {} bytes is not inside one page",
            fr.addr, fr.offset, fr.len
        ),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]

    use std::io::{Seek, SeekFrom};

    use krpc_rdma::soft::SoftQp;
    use mbuf::{Chain, Fragment, HeapPageArena};

    use super::*;

    /// A dialer that only has pages: the default file I/O under test.
    struct PagesOnly(Arc<dyn PageProvider>);

    impl Dialer for PagesOnly {
        type Qp = SoftQp;
        fn peer(&self) -> &str {
            "nowhere"
        }
        fn pages(&self) -> &Arc<dyn PageProvider> {
            &self.0
        }
        fn resources(&self) -> Resources {
            krpc_rdma::soft::SoftConfig::default().resources()
        }
        fn dial(&mut self, _: &[u8]) -> Result<SoftQp, RunError> {
            Err(RunError::Failed("no".into()))
        }
        fn wait(&mut self, _: &mut SoftQp, _: Duration) {}
    }

    fn frags(c: &Chain) -> Vec<PageFragment> {
        c.fragments()
            .filter_map(|f| match f {
                Fragment::Page { addr, offset, len } => Some(PageFragment { addr, offset, len }),
                Fragment::Bytes(_) => None,
            })
            .collect()
    }

    fn file(name: &str, bytes: &[u8]) -> File {
        let p = std::env::temp_dir().join(format!("dialer-{}-{name}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        let f = File::options().read(true).write(true).open(&p).unwrap();
        let _ = std::fs::remove_file(&p);
        f
    }

    #[test]
    fn file_bytes_go_into_pages_and_back_unchanged() {
        let d = PagesOnly(Arc::new(HeapPageArena::new(16).unwrap()));
        let want: Vec<u8> = (0..3 * PAGE_SIZE + 5)
            .map(|i| (i * 7 + i / 4096) as u8)
            .collect();
        let pages = Chain::alloc_pages(d.pages(), want.len()).unwrap();
        let fr = frags(&pages);
        assert_eq!(d.read_file(&file("in", &want), &fr).unwrap(), want.len());
        assert_eq!(pages.to_vec().unwrap(), want);
        let out = file("out", &[]);
        assert_eq!(d.write_file(&out, &fr).unwrap(), want.len());
        let mut got = Vec::new();
        (&out).seek(SeekFrom::Start(0)).unwrap();
        (&out).read_to_end(&mut got).unwrap();
        assert_eq!(got, want);
    }

    #[test]
    fn a_short_file_fills_only_what_it_has() {
        let d = PagesOnly(Arc::new(HeapPageArena::new(4).unwrap()));
        let pages = Chain::alloc_pages(d.pages(), 2 * PAGE_SIZE).unwrap();
        let n = d
            .read_file(&file("short", &[9; 5000]), &frags(&pages))
            .unwrap();
        assert_eq!(n, 5000);
    }

    #[test]
    fn a_fragment_that_is_not_in_one_page_is_refused() {
        let d = PagesOnly(Arc::new(HeapPageArena::new(4).unwrap()));
        let pages = Chain::alloc_pages(d.pages(), PAGE_SIZE).unwrap();
        let mut fr = frags(&pages);
        fr[0].len = PAGE_SIZE + 1;
        let e = d.read_file(&file("bad", &[1; 8192]), &fr).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = d.write_file(&file("bad2", &[]), &fr).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }
}
