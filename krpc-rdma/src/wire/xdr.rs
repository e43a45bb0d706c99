//! Bounds-checked XDR primitives (RFC 4506: big-endian, 4-byte units). Private to `wire`.

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
