//! XDR (RFC 4506) primitives: a checked decoder over a byte slice and an encoder that never
//! panics (allocation failure is reported once, at [`Encoder::finish`]).
//!
//! Every item is a multiple of four bytes; variable-length opaque data and strings carry a
//! length word and are padded with zero bytes to a multiple of four. The decoder accepts any
//! pad bytes (as Linux's sunrpc does) but requires them to be present.

use alloc::vec::Vec;
use core::fmt;

/// Why XDR could not be decoded (or encoded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdrError {
    /// The input ended: `need` bytes were needed at offset `at`.
    Short {
        /// Offset of the item.
        at: usize,
        /// Bytes the item needs.
        need: usize,
    },
    /// A boolean that is neither 0 nor 1.
    BadBool(u32),
    /// A discriminant outside its enumeration.
    BadEnum {
        /// The type.
        what: &'static str,
        /// The value seen.
        value: u32,
    },
    /// A variable-length item longer than its bound.
    TooLong {
        /// The item.
        what: &'static str,
        /// Its length.
        len: usize,
        /// The bound.
        max: usize,
    },
    /// A linked list (RFC 1813's `*next` entries) with more than the allowed entries.
    TooManyEntries {
        /// The list.
        what: &'static str,
        /// The bound.
        max: usize,
    },
    /// The encoder could not allocate.
    Alloc,
}

impl fmt::Display for XdrError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            XdrError::Short { at, need } => {
                write!(f, "XDR input ends: {need} bytes needed at offset {at}")
            }
            XdrError::BadBool(v) => write!(f, "XDR boolean {v} is neither 0 nor 1"),
            XdrError::BadEnum { what, value } => write!(f, "{value} is not a valid {what}"),
            XdrError::TooLong { what, len, max } => {
                write!(f, "{what} of {len} bytes exceeds its bound of {max}")
            }
            XdrError::TooManyEntries { what, max } => {
                write!(f, "{what} has more than {max} entries")
            }
            XdrError::Alloc => write!(f, "out of memory while encoding XDR"),
        }
    }
}

/// Bytes of zero padding after `len` bytes of opaque data.
pub const fn pad(len: usize) -> usize {
    (4 - len % 4) % 4
}

/// `len` rounded up to a multiple of four (XDR roundup).
pub const fn roundup(len: usize) -> usize {
    len + pad(len)
}

/// A checked reader of XDR items from a byte slice.
#[derive(Debug, Clone)]
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Decoder<'a> {
    /// Decode from the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Decoder { buf, pos: 0 }
    }

    /// Offset of the next item.
    pub fn pos(&self) -> usize {
        self.pos
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.buf.len().saturating_sub(self.pos)
    }

    /// Take the next `n` raw bytes.
    ///
    /// # Errors
    /// [`XdrError::Short`] if fewer remain.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], XdrError> {
        let short = XdrError::Short {
            at: self.pos,
            need: n,
        };
        let end = self.pos.checked_add(n).ok_or(short)?;
        let b = self.buf.get(self.pos..end).ok_or(short)?;
        self.pos = end;
        Ok(b)
    }

    /// Skip `n` bytes.
    ///
    /// # Errors
    /// [`XdrError::Short`] if fewer remain.
    pub fn skip(&mut self, n: usize) -> Result<(), XdrError> {
        self.take(n).map(|_| ())
    }

    /// An unsigned 32-bit integer.
    ///
    /// # Errors
    /// [`XdrError::Short`].
    pub fn u32(&mut self) -> Result<u32, XdrError> {
        let b = self.take(4)?;
        let a: [u8; 4] = b.try_into().map_err(|_| XdrError::Short {
            at: self.pos,
            need: 4,
        })?;
        Ok(u32::from_be_bytes(a))
    }

    /// A signed 32-bit integer.
    ///
    /// # Errors
    /// [`XdrError::Short`].
    pub fn i32(&mut self) -> Result<i32, XdrError> {
        self.u32().map(|v| v as i32)
    }

    /// An unsigned hyper (64-bit) integer.
    ///
    /// # Errors
    /// [`XdrError::Short`].
    pub fn u64(&mut self) -> Result<u64, XdrError> {
        let hi = self.u32()?;
        let lo = self.u32()?;
        Ok((u64::from(hi) << 32) | u64::from(lo))
    }

    /// A boolean.
    ///
    /// # Errors
    /// [`XdrError::Short`], [`XdrError::BadBool`].
    pub fn bool(&mut self) -> Result<bool, XdrError> {
        match self.u32()? {
            0 => Ok(false),
            1 => Ok(true),
            v => Err(XdrError::BadBool(v)),
        }
    }

    /// Fixed-length opaque data of `n` bytes (plus its pad).
    ///
    /// # Errors
    /// [`XdrError::Short`].
    pub fn opaque_fixed(&mut self, n: usize) -> Result<&'a [u8], XdrError> {
        let b = self.take(n)?;
        self.skip(pad(n))?;
        Ok(b)
    }

    /// The length word of variable-length opaque data bounded by `max`, without the data.
    ///
    /// # Errors
    /// [`XdrError::Short`], [`XdrError::TooLong`].
    pub fn opaque_len(&mut self, what: &'static str, max: usize) -> Result<usize, XdrError> {
        let len = self.u32()? as usize;
        if len > max {
            return Err(XdrError::TooLong { what, len, max });
        }
        Ok(len)
    }

    /// Variable-length opaque data (or a string) of at most `max` bytes.
    ///
    /// # Errors
    /// [`XdrError::Short`], [`XdrError::TooLong`].
    pub fn opaque(&mut self, what: &'static str, max: usize) -> Result<&'a [u8], XdrError> {
        let len = self.opaque_len(what, max)?;
        self.opaque_fixed(len)
    }
}

/// An XDR writer into a growing buffer. Allocation failure does not panic: it is remembered
/// and reported by [`Encoder::finish`] (later writes are ignored).
#[derive(Debug, Default)]
pub struct Encoder {
    buf: Vec<u8>,
    failed: bool,
}

impl Encoder {
    /// An empty encoder.
    pub fn new() -> Self {
        Encoder::default()
    }

    /// An empty encoder with room for `n` bytes (allocation failure marks it failed, see
    /// [`Encoder::finish`]): one allocation for a message of known size instead of the
    /// growth steps.
    pub fn with_capacity(n: usize) -> Self {
        let mut e = Encoder::new();
        if e.buf.try_reserve_exact(n).is_err() {
            e.failed = true;
        }
        e
    }

    /// Bytes written so far.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing was written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Append raw bytes (no length, no pad).
    pub fn raw(&mut self, b: &[u8]) {
        if self.failed || self.buf.try_reserve(b.len()).is_err() {
            self.failed = true;
            return;
        }
        self.buf.extend_from_slice(b);
    }

    /// An unsigned 32-bit integer.
    pub fn u32(&mut self, v: u32) {
        self.raw(&v.to_be_bytes());
    }

    /// A signed 32-bit integer.
    pub fn i32(&mut self, v: i32) {
        self.raw(&v.to_be_bytes());
    }

    /// An unsigned hyper.
    pub fn u64(&mut self, v: u64) {
        self.raw(&v.to_be_bytes());
    }

    /// A boolean.
    pub fn bool(&mut self, v: bool) {
        self.u32(u32::from(v));
    }

    /// Fixed-length opaque data (plus pad).
    pub fn opaque_fixed(&mut self, b: &[u8]) {
        self.raw(b);
        self.raw([0u8; 3].get(..pad(b.len())).unwrap_or_default());
    }

    /// Variable-length opaque data or a string: length, bytes, pad. A length that does not
    /// fit 32 bits marks the encoder failed.
    pub fn opaque(&mut self, b: &[u8]) {
        match u32::try_from(b.len()) {
            Ok(n) => {
                self.u32(n);
                self.opaque_fixed(b);
            }
            Err(_) => self.failed = true,
        }
    }

    /// Mark the encoding failed (reported by [`Encoder::finish`]).
    pub fn fail(&mut self) {
        self.failed = true;
    }

    /// The bytes, or [`XdrError::Alloc`] if anything could not be written.
    ///
    /// # Errors
    /// [`XdrError::Alloc`].
    pub fn finish(self) -> Result<Vec<u8>, XdrError> {
        if self.failed {
            Err(XdrError::Alloc)
        } else {
            Ok(self.buf)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_bounds() {
        let mut e = Encoder::new();
        e.u32(7);
        e.u64(0x0102_0304_0506_0708);
        e.bool(true);
        e.opaque(b"abcde");
        e.opaque_fixed(b"xy");
        let b = e.finish().unwrap();
        assert_eq!(b.len(), 4 + 8 + 4 + 4 + 8 + 4);
        let mut d = Decoder::new(&b);
        assert_eq!(d.u32().unwrap(), 7);
        assert_eq!(d.u64().unwrap(), 0x0102_0304_0506_0708);
        assert!(d.bool().unwrap());
        assert_eq!(d.opaque("name", 5).unwrap(), b"abcde");
        assert_eq!(d.opaque_fixed(2).unwrap(), b"xy");
        assert_eq!(d.remaining(), 0);
        assert_eq!(d.u32(), Err(XdrError::Short { at: 32, need: 4 }));

        let mut d = Decoder::new(&b[16..]);
        assert_eq!(
            d.opaque("name", 4),
            Err(XdrError::TooLong {
                what: "name",
                len: 5,
                max: 4
            })
        );
        let mut d = Decoder::new(&[0, 0, 0, 2]);
        assert_eq!(d.bool(), Err(XdrError::BadBool(2)));
        // A length word claiming more than the input: short, not a panic.
        let mut d = Decoder::new(&[0xff, 0xff, 0xff, 0xff, 1]);
        assert!(matches!(
            d.opaque("x", usize::MAX),
            Err(XdrError::Short { .. })
        ));
    }
}
