//! A small ONC RPC server over TCP (RFC 5531 record marking) for MOUNT v3: one thread per
//! connection, each record handed to [`MountService::dispatch`].

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use nfs_glue::mount::{Exports, MountService};

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
}

impl Mountd {
    /// Listen on `addr` (port 0: any).
    ///
    /// # Errors
    /// The address cannot be bound.
    pub fn bind(addr: SocketAddr) -> io::Result<Mountd> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(Mountd { listener })
    }

    /// The bound address.
    ///
    /// # Errors
    /// As `TcpListener::local_addr`.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Serve on a thread of its own until `stop`.
    ///
    /// # Errors
    /// The thread cannot be spawned.
    pub fn spawn<E: Exports + Send + Sync + 'static>(
        self,
        svc: Arc<MountService<E>>,
        stop: &'static AtomicBool,
    ) -> io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new()
            .name("mountd".into())
            .spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    match self.listener.accept() {
                        Ok((s, peer)) => {
                            let svc = svc.clone();
                            let _ = s.set_nonblocking(false);
                            let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
                            let spawned = std::thread::Builder::new()
                                .name(format!("mountd {peer}"))
                                .spawn(move || serve_stream(&svc, s, peer));
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
