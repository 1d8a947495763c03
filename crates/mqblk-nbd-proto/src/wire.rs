//! Big-endian field readers and writers: the two primitives every message
//! of this crate is built from.

use crate::error::WireError;

/// A cursor over received bytes. Every read checks the length, so no input
/// can make decoding panic.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Read from the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }

    /// Bytes not read yet.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Take `n` bytes.
    #[inline]
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], WireError> {
        if self.remaining() < n {
            return Err(WireError::Truncated {
                need: self.pos.saturating_add(n),
                have: self.buf.len(),
            });
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    /// Take the rest.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }

    /// A big-endian u16.
    #[inline]
    pub fn u16(&mut self) -> Result<u16, WireError> {
        let b = self.bytes(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }

    /// A big-endian u32.
    #[inline]
    pub fn u32(&mut self) -> Result<u32, WireError> {
        let b = self.bytes(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    /// A big-endian u64.
    #[inline]
    pub fn u64(&mut self) -> Result<u64, WireError> {
        let b = self.bytes(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }

    /// A string of `len` bytes: UTF-8, no NUL, at most `MAX_STRING`.
    pub fn string(&mut self, len: usize, what: &'static str) -> Result<&'a str, WireError> {
        if len > crate::consts::MAX_STRING {
            return Err(WireError::TooLong {
                what,
                len: len as u64,
                max: crate::consts::MAX_STRING as u64,
            });
        }
        let b = self.bytes(len)?;
        let s = std::str::from_utf8(b).map_err(|_| WireError::Invalid {
            what,
            why: "not UTF-8",
        })?;
        if s.contains('\0') {
            return Err(WireError::Invalid {
                what,
                why: "contains NUL",
            });
        }
        Ok(s)
    }

    /// A string prefixed by its 32-bit length.
    pub fn string32(&mut self, what: &'static str) -> Result<&'a str, WireError> {
        let len = self.u32()? as usize;
        self.string(len, what)
    }

    /// Fail unless everything was read.
    pub fn finish(&self, what: &'static str) -> Result<(), WireError> {
        if self.remaining() != 0 {
            return Err(WireError::Invalid {
                what,
                why: "trailing bytes",
            });
        }
        Ok(())
    }
}

/// Append big-endian fields to a byte vector.
pub trait Put {
    /// Append a u16.
    fn put_u16(&mut self, v: u16);
    /// Append a u32.
    fn put_u32(&mut self, v: u32);
    /// Append a u64.
    fn put_u64(&mut self, v: u64);
}

impl Put for Vec<u8> {
    #[inline]
    fn put_u16(&mut self, v: u16) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    #[inline]
    fn put_u32(&mut self, v: u32) {
        self.extend_from_slice(&v.to_be_bytes());
    }
    #[inline]
    fn put_u64(&mut self, v: u64) {
        self.extend_from_slice(&v.to_be_bytes());
    }
}
