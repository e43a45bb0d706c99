//! The first bytes of a message, where its RPC header is decoded (`clnt` reads a reply's,
//! `svc` a call's): a scratch buffer reserved once per connection, so that reading a header
//! never allocates.

use alloc::vec::Vec;

use mbuf::Chain;

use crate::mbuf_bridge::BridgeError;

/// Room for the first `max` bytes of a chain (see the module docs).
#[derive(Debug)]
pub(crate) struct Head {
    buf: Vec<u8>,
    max: usize,
}

impl Head {
    /// Reserve `max` bytes.
    ///
    /// # Errors
    /// [`BridgeError::NoMemory`].
    pub(crate) fn new(max: usize) -> Result<Head, BridgeError> {
        let mut buf = Vec::new();
        buf.try_reserve_exact(max)
            .map_err(|_| BridgeError::NoMemory)?;
        Ok(Head { buf, max })
    }

    /// The first bytes of `c`, `max` of them at most (all of a shorter chain), copied into
    /// the reserved room (a resize within the capacity: no allocation); `None` if the chain
    /// cannot be read.
    pub(crate) fn of(&mut self, c: &Chain) -> Option<&[u8]> {
        self.buf.clear();
        self.buf.resize(c.len().min(self.max), 0);
        c.copydata(0, &mut self.buf).ok()?;
        Some(&self.buf)
    }
}
