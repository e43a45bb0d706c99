//! A small ONC RPC server over TCP (RFC 5531 record marking) for MOUNT v3: one thread per
//! connection, at most `--max-mount-connections` at once (a connection beyond them is closed
//! at once, with one line on stdout), each record handed to [`MountService::dispatch`].

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The default of `--max-mount-connections`.
pub const DEFAULT_MAX_MOUNT_CONNECTIONS: u32 = 16;

/// The MOUNT service's command-line options.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::Args)]
pub struct MountLimits {
    /// Most MOUNT (TCP) connections served at once (one thread each); further ones are
    /// closed at once.
    #[arg(long, value_name = "N", default_value_t = DEFAULT_MAX_MOUNT_CONNECTIONS,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_mount_connections: u32,
}

impl Default for MountLimits {
    fn default() -> Self {
        MountLimits {
            max_mount_connections: DEFAULT_MAX_MOUNT_CONNECTIONS,
        }
    }
}

/// Gives its connection's place back when the connection's thread ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

use nfs_service::mount::{Exports, MountService};

/// The largest call record accepted (a MOUNT call is a few hundred bytes).
pub const MAX_RECORD: usize = 64 * 1024;
const LAST_FRAGMENT: u32 = 0x8000_0000;

/// Read one record (all its fragments); `None` at a clean end of stream.
///
/// # Errors
/// I/O errors, or a record over [`MAX_RECORD`] (`InvalidData`).
pub fn read_record(s: &mut impl Read) -> io::Result<Option<Vec<u8>>> {
    let mut rec = Vec::new();
    loop {
        let mut h = [0u8; 4];
        match s.read_exact(&mut h) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && rec.is_empty() => {
                return Ok(None)
            }
            Err(e) => return Err(e),
        }
        let h = u32::from_be_bytes(h);
        let len = (h & !LAST_FRAGMENT) as usize;
        let total = rec
            .len()
            .checked_add(len)
            .filter(|t| *t <= MAX_RECORD)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "record too long"))?;
        let at = rec.len();
        rec.resize(total, 0);
        s.read_exact(rec.get_mut(at..).unwrap_or_default())?;
        if h & LAST_FRAGMENT != 0 {
            return Ok(Some(rec));
        }
    }
}

/// Write `msg` as one record of one fragment.
///
/// # Errors
/// I/O errors; a message over 2^31 - 1 bytes (`InvalidInput`).
pub fn write_record(s: &mut impl Write, msg: &[u8]) -> io::Result<()> {
    let len = u32::try_from(msg.len())
        .ok()
        .filter(|l| l & LAST_FRAGMENT == 0)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "reply too long"))?;
    let mut out = Vec::with_capacity(msg.len() + 4);
    out.extend_from_slice(&(len | LAST_FRAGMENT).to_be_bytes());
    out.extend_from_slice(msg);
    s.write_all(&out)
}

fn serve_stream<E: Exports>(svc: &MountService<E>, mut s: TcpStream, peer: SocketAddr) {
    let client = peer.ip().to_string();
    while let Ok(Some(call)) = read_record(&mut s) {
        // Not a call: nothing to answer; out of memory: the client retries.
        if let Ok(reply) = svc.dispatch(&call, client.as_bytes()) {
            if write_record(&mut s, &reply).is_err() {
                return;
            }
        }
    }
}

/// A bound MOUNT server.
#[derive(Debug)]
pub struct Mountd {
    listener: TcpListener,
    open: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
}

impl Mountd {
    /// Listen on `addr` (port 0: any).
    ///
    /// # Errors
    /// The address cannot be bound.
    pub fn bind(addr: SocketAddr) -> io::Result<Mountd> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(Mountd {
            listener,
            open: Arc::new(AtomicUsize::new(0)),
            refused: Arc::new(AtomicUsize::new(0)),
        })
    }

    /// Connections being served now and connections refused so far (shared with the
    /// serving thread: read them while it runs).
    pub fn counts(&self) -> (Arc<AtomicUsize>, Arc<AtomicUsize>) {
        (self.open.clone(), self.refused.clone())
    }

    /// The bound address.
    ///
    /// # Errors
    /// As `TcpListener::local_addr`.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve on a thread of its own until `stop`, one thread per connection, at most
    /// `limits.max_mount_connections` at once: a connection beyond them is closed at once
    /// (the client sees the connection reset or closed) and one line says so.
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn spawn<E: Exports + Send + Sync + 'static>(
        self,
        svc: Arc<MountService<E>>,
        limits: MountLimits,
        stop: &'static AtomicBool,
    ) -> io::Result<std::thread::JoinHandle<()>> {
        let max = limits.max_mount_connections as usize;
        std::thread::Builder::new()
            .name("mountd".into())
            .spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match self.listener.accept() {
                        Ok((s, peer)) => {
                            let open = self.open.load(Ordering::Acquire);
                            if open >= max {
                                self.refused.fetch_add(1, Ordering::AcqRel);
                                println!(
                                    "mountd: refused a connection from {peer}: {open} connections open (--max-mount-connections)"
                                );
                                drop(s);
                                continue;
                            }
                            self.open.fetch_add(1, Ordering::AcqRel);
                            let slot = Slot(self.open.clone());
                            let svc = svc.clone();
                            let _ = s.set_nonblocking(false);
                            let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
                            let spawned = std::thread::Builder::new()
                                .name(format!("mountd {peer}"))
                                .spawn(move || {
                                    let _slot = slot;
                                    serve_stream(&svc, s, peer);
                                });
                            // Not spawned: the closure, its slot and the stream are dropped.
                            drop(spawned);
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            std::thread::sleep(Duration::from_millis(50));
                        }
                        Err(_) => std::thread::sleep(Duration::from_millis(50)),
                    }
                }
            })
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_across_fragments() {
        let mut wire = Vec::new();
        // Two fragments: 3 bytes, then 2 bytes, last.
        wire.extend_from_slice(&3u32.to_be_bytes());
        wire.extend_from_slice(b"abc");
        wire.extend_from_slice(&(2u32 | LAST_FRAGMENT).to_be_bytes());
        wire.extend_from_slice(b"de");
        write_record(&mut wire, b"xyz").unwrap();
        let mut r = wire.as_slice();
        assert_eq!(read_record(&mut r).unwrap().unwrap(), b"abcde");
        assert_eq!(read_record(&mut r).unwrap().unwrap(), b"xyz");
        assert!(read_record(&mut r).unwrap().is_none());
        let mut big = Vec::new();
        big.extend_from_slice(&(LAST_FRAGMENT | (MAX_RECORD as u32 + 1)).to_be_bytes());
        assert!(read_record(&mut big.as_slice()).is_err());
    }
}
