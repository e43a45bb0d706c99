//! Hex text to bytes and back, for the `decode` tool and `mount-fh`.

/// Why a line is not hex.
#[derive(Debug, PartialEq, Eq)]
pub enum HexError {
    /// A character that is not a hex digit (nor ignorable whitespace or ':').
    BadChar {
        /// Its index in the line.
        index: usize,
        /// The character.
        ch: char,
    },
    /// An odd number of hex digits.
    OddLength(usize),
}

impl core::fmt::Display for HexError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            HexError::BadChar { index, ch } => {
                write!(f, "invalid hex: character {ch:?} at column {}", index + 1)
            }
            HexError::OddLength(n) => write!(f, "invalid hex: odd number of digits ({n})"),
        }
    }
}

/// Parses hex text; ASCII whitespace and ':' separators are ignored, a leading "0x" is allowed.
pub fn parse(text: &str) -> Result<Vec<u8>, HexError> {
    let trimmed = text.trim();
    let (skip, body) = match trimmed
        .strip_prefix("0x")
        .or_else(|| trimmed.strip_prefix("0X"))
    {
        Some(rest) => (2, rest),
        None => (0, trimmed),
    };
    let lead = text.len() - text.trim_start().len() + skip;
    let mut out = Vec::with_capacity(body.len() / 2);
    let mut high: Option<u8> = None;
    let mut digits = 0usize;
    for (i, ch) in body.char_indices() {
        if ch.is_ascii_whitespace() || ch == ':' {
            continue;
        }
        let Some(v) = ch.to_digit(16) else {
            return Err(HexError::BadChar {
                index: lead + i,
                ch,
            });
        };
        let v = v as u8;
        digits += 1;
        match high.take() {
            None => high = Some(v),
            Some(h) => out.push((h << 4) | v),
        }
    }
    if high.is_some() {
        return Err(HexError::OddLength(digits));
    }
    Ok(out)
}

/// Lower-case hex of `bytes`, no separators.
pub fn encode(bytes: &[u8]) -> String {
    use core::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        // Writing into a String cannot fail.
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_separators() {
        assert_eq!(parse("0x00 ff:1a").unwrap(), vec![0x00, 0xff, 0x1a]);
        assert_eq!(encode(&[0x00, 0xff, 0x1a]), "00ff1a");
        assert_eq!(parse("").unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn errors_name_the_problem() {
        assert_eq!(parse("abc"), Err(HexError::OddLength(3)));
        assert_eq!(
            parse("  0xag"),
            Err(HexError::BadChar { index: 5, ch: 'g' })
        );
    }
}
