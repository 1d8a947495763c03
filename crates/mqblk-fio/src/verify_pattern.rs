//! fio's `verify_pattern=`: the bytes a verify job writes after each
//! header (or alone, with `verify=pattern`), repeated over the buffer, and
//! checked on read-back. As fio's `lib/pattern.c`: hex numbers (`0xaa55`,
//! their bytes in the order written), decimal numbers (little-endian, in
//! as few bytes as they need), quoted strings (`"abcd"`), and `%o`, the
//! I/O's offset in 8 little-endian bytes, in any sequence:
//! `0xff%o"abcd"-12`.

/// Longest pattern (fio's `MAX_PATTERN_SIZE`).
pub const PATTERN_BYTES_MAX: usize = 512;

/// A parsed `verify_pattern=`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyPattern {
    /// The pattern, with 8 zero bytes where each `%o` goes.
    bytes: Vec<u8>,
    /// Where the `%o`s go.
    offsets_at: Vec<usize>,
}

impl VerifyPattern {
    /// Parse fio's syntax.
    pub fn parse(s: &str) -> Result<VerifyPattern, String> {
        let mut bytes = Vec::new();
        let mut offsets_at = Vec::new();
        let mut rest = s.trim();
        while !rest.is_empty() {
            if let Some(r) = rest.strip_prefix("%o") {
                offsets_at.push(bytes.len());
                bytes.extend([0u8; 8]);
                rest = r;
            } else if let Some(r) = rest.strip_prefix('"') {
                let end = r.find('"').ok_or("a string without its closing quote")?;
                bytes.extend(&r.as_bytes()[..end]);
                rest = &r[end + 1..];
            } else if let Some(r) = rest.strip_prefix("0x").or_else(|| rest.strip_prefix("0X")) {
                let mut end = r.find(|c: char| !c.is_ascii_hexdigit()).unwrap_or(r.len());
                // `0xff0x14` is two numbers.
                if r[..end].len() > 1 && r[end.saturating_sub(1)..].starts_with("0x") {
                    end -= 1;
                }
                let digits = &r[..end];
                if digits.is_empty() {
                    return Err("0x without hex digits".into());
                }
                // An odd count: the first digit is a byte of its own.
                let (first, pairs) = digits.split_at(digits.len() % 2);
                if !first.is_empty() {
                    bytes.push(u8::from_str_radix(first, 16).map_err(|e| e.to_string())?);
                }
                for i in (0..pairs.len()).step_by(2) {
                    bytes
                        .push(u8::from_str_radix(&pairs[i..i + 2], 16).map_err(|e| e.to_string())?);
                }
                rest = &r[end..];
            } else if rest.starts_with(|c: char| c.is_ascii_digit() || c == '-') {
                let end = rest[1..]
                    .find(|c: char| !c.is_ascii_digit())
                    .map_or(rest.len(), |i| i + 1);
                // fio stops a decimal at a following 0x.
                let end = rest[..end].find("0x").filter(|&i| i > 0).unwrap_or(end);
                let n: i64 = rest[..end]
                    .parse()
                    .map_err(|_| format!("{:?} is not a number", &rest[..end]))?;
                if n > i64::from(i32::MAX) || n < i64::from(i32::MIN) {
                    return Err(format!("{n} does not fit in 32 bits (use 0x for more)"));
                }
                let mut v = n as i32 as u32;
                if v == 0 {
                    bytes.push(0);
                }
                while v != 0 {
                    bytes.push(v as u8);
                    v >>= 8;
                }
                rest = &rest[end..];
            } else {
                return Err(format!(
                    "unexpected {:?}: expected 0xHEX, a decimal number, \"string\" or %o",
                    rest.chars().next().unwrap_or(' ')
                ));
            }
            rest = rest.trim_start();
            if bytes.len() > PATTERN_BYTES_MAX {
                return Err(format!("longer than {PATTERN_BYTES_MAX} bytes"));
            }
        }
        if bytes.is_empty() {
            return Err("an empty pattern".into());
        }
        Ok(VerifyPattern { bytes, offsets_at })
    }

    /// The pattern with the I/O's offset pasted at each `%o`, into `out`
    /// (at least [`VerifyPattern::len`] bytes).
    fn with_offset<'a>(&self, offset: u64, out: &'a mut [u8]) -> &'a [u8] {
        let out = &mut out[..self.bytes.len()];
        out.copy_from_slice(&self.bytes);
        for &at in &self.offsets_at {
            out[at..at + 8].copy_from_slice(&offset.to_le_bytes());
        }
        out
    }

    /// Fill `buf[from..]` as fio fills a buffer from its start (position
    /// p holds byte p mod the pattern's length) for an I/O at `offset`.
    pub fn fill(&self, buf: &mut [u8], from: usize, offset: u64) {
        let mut tmp = [0u8; PATTERN_BYTES_MAX + 8];
        let pat = self.with_offset(offset, &mut tmp);
        for (i, b) in buf.iter_mut().enumerate().skip(from) {
            *b = pat[i % pat.len()];
        }
    }

    /// Whether `buf[from..]` is as [`VerifyPattern::fill`] makes it; the
    /// first byte that differs, if one does.
    pub fn first_difference(&self, buf: &[u8], from: usize, offset: u64) -> Option<usize> {
        let mut tmp = [0u8; PATTERN_BYTES_MAX + 8];
        let pat = self.with_offset(offset, &mut tmp);
        (from..buf.len()).find(|&i| buf[i] != pat[i % pat.len()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fio_s_syntax_parses() {
        let p = VerifyPattern::parse("0xaa555aa5").unwrap();
        assert_eq!(p.bytes, [0xaa, 0x55, 0x5a, 0xa5]);
        let p = VerifyPattern::parse("0xff%o\"abcd\"-12").unwrap();
        assert_eq!(p.bytes.len(), 1 + 8 + 4 + 4);
        assert_eq!(p.offsets_at, [1]);
        assert_eq!(&p.bytes[9..13], b"abcd");
        assert_eq!(&p.bytes[13..], (-12i32 as u32).to_le_bytes());
        assert_eq!(
            VerifyPattern::parse("0xff0x14").unwrap().bytes,
            [0xff, 0x14]
        );
        assert_eq!(VerifyPattern::parse("0xabc").unwrap().bytes, [0x0a, 0xbc]);
        assert_eq!(VerifyPattern::parse("258").unwrap().bytes, [2, 1]);
        for bad in ["", "0x", "\"abc", "xyz", "99999999999"] {
            assert!(VerifyPattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_offset_is_pasted_and_checked() {
        let p = VerifyPattern::parse("%o").unwrap();
        let mut buf = [0u8; 64];
        p.fill(&mut buf, 8, 0x1234);
        assert_eq!(buf[..8], [0; 8]);
        assert_eq!(&buf[8..16], &0x1234u64.to_le_bytes());
        assert_eq!(p.first_difference(&buf, 8, 0x1234), None);
        assert_eq!(p.first_difference(&buf, 8, 0x1235), Some(8));
    }
}
