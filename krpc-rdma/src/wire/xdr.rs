//! Bounds-checked XDR primitives (RFC 4506: big-endian, 4-byte units). Private to `wire`.

use super::error::EncodeError;

/// Reads the big-endian `u32` at `off`, or `None` when the buffer ends first.
pub(crate) fn get_u32(buf: &[u8], off: usize) -> Option<u32> {
    let end = off.checked_add(4)?;
    let bytes: [u8; 4] = buf.get(off..end)?.try_into().ok()?;
    Some(u32::from_be_bytes(bytes))
}

/// Writes `value` big-endian at `off`, or `None` when the buffer is too short.
pub(crate) fn put_u32(buf: &mut [u8], off: usize, value: u32) -> Option<()> {
    let end = off.checked_add(4)?;
    buf.get_mut(off..end)?.copy_from_slice(&value.to_be_bytes());
    Some(())
}

/// Sequential encoder over a buffer whose length the caller has already checked; every write
/// is still bounds-checked and reports [`EncodeError::BufferTooShort`] instead of panicking.
pub(crate) struct Writer<'a> {
    buf: &'a mut [u8],
    off: usize,
}

impl<'a> Writer<'a> {
    pub(crate) fn new(buf: &'a mut [u8]) -> Self {
        Writer { buf, off: 0 }
    }

    /// Bytes written so far.
    pub(crate) fn len(&self) -> usize {
        self.off
    }

    fn short(&self, more: usize) -> EncodeError {
        EncodeError::BufferTooShort {
            needed: self.off.saturating_add(more),
            available: self.buf.len(),
        }
    }

    pub(crate) fn u32(&mut self, value: u32) -> Result<(), EncodeError> {
        put_u32(self.buf, self.off, value).ok_or_else(|| self.short(4))?;
        self.off += 4;
        Ok(())
    }

    pub(crate) fn bytes(&mut self, data: &[u8]) -> Result<(), EncodeError> {
        let short = self.short(data.len());
        let end = self.off.checked_add(data.len()).ok_or(short)?;
        let dst = self.buf.get_mut(self.off..end).ok_or(short)?;
        dst.copy_from_slice(data);
        self.off = end;
        Ok(())
    }
}
