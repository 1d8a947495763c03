//! Errors: the NBD error values sent in replies ([`NbdErrno`]), and the
//! decoding errors of this crate ([`WireError`]).

/// An NBD error value (the protocol's restricted errno set).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u32)]
pub enum NbdErrno {
    /// Operation not permitted (write to a read-only export).
    Perm = 1,
    /// Input/output error.
    Io = 5,
    /// Cannot allocate memory.
    NoMem = 12,
    /// Invalid argument (range, alignment, flags, unknown command).
    Inval = 22,
    /// No space left on device (write past the end).
    NoSpc = 28,
    /// Value too large.
    Overflow = 75,
    /// Operation not supported (fast zero only).
    NotSup = 95,
    /// The server is shutting down.
    Shutdown = 108,
}

impl NbdErrno {
    /// The wire value.
    #[inline]
    pub fn code(self) -> u32 {
        self as u32
    }

    /// Decode a wire value; unknown values are treated as `EINVAL`, as the
    /// protocol tells clients to do.
    pub fn from_code(code: u32) -> NbdErrno {
        match code {
            1 => NbdErrno::Perm,
            5 => NbdErrno::Io,
            12 => NbdErrno::NoMem,
            28 => NbdErrno::NoSpc,
            75 => NbdErrno::Overflow,
            95 => NbdErrno::NotSup,
            108 => NbdErrno::Shutdown,
            _ => NbdErrno::Inval,
        }
    }

    /// The protocol's name for it.
    pub fn name(self) -> &'static str {
        match self {
            NbdErrno::Perm => "EPERM",
            NbdErrno::Io => "EIO",
            NbdErrno::NoMem => "ENOMEM",
            NbdErrno::Inval => "EINVAL",
            NbdErrno::NoSpc => "ENOSPC",
            NbdErrno::Overflow => "EOVERFLOW",
            NbdErrno::NotSup => "ENOTSUP",
            NbdErrno::Shutdown => "ESHUTDOWN",
        }
    }
}

impl std::fmt::Display for NbdErrno {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A message that does not decode. Every variant means the peer broke the
/// framing or the rules of a message, so the connection cannot go on.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Fewer bytes than the message needs.
    #[error("message truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the message needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// A magic number that is not the expected one.
    #[error("bad magic {found:#x}, expected {expected:#x}")]
    BadMagic {
        /// Expected magic.
        expected: u64,
        /// Magic found.
        found: u64,
    },
    /// A length field over the limit this side accepts.
    #[error("{what} length {len} is over the limit of {max}")]
    TooLong {
        /// Which length.
        what: &'static str,
        /// The length sent.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// Client flags the server did not offer.
    #[error("unknown or unoffered client flags {0:#x}")]
    BadClientFlags(u32),
    /// A field whose value breaks the message's rules.
    #[error("invalid {what}: {why}")]
    Invalid {
        /// Which field.
        what: &'static str,
        /// What is wrong.
        why: &'static str,
    },
}
