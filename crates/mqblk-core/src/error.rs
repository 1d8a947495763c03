//! Errors of the core layer. A bad request is answered with an error that
//! names the device, the offset and the limit it broke; nothing panics.
//!
//! [`Status`] is the one-byte outcome stored in a bio or request on the hot
//! path (Linux `blk_status_t`). [`Error`] is the typed error a caller sees;
//! it is only built on the error path.

use std::fmt;
use std::sync::Arc;

use crate::op::Op;

/// The outcome of a bio or request, one byte (Linux `blk_status_t`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum Status {
    /// Completed successfully.
    #[default]
    Ok = 0,
    /// The device reported an I/O error (EIO).
    IoError,
    /// The request was not completed by the driver within the queue's timeout.
    Timeout,
    /// The device is out of space (ENOSPC).
    NoSpace,
    /// The driver does not support the operation (EOPNOTSUPP).
    NotSupported,
    /// The medium reported an unrecoverable error at this range (bad block).
    Medium,
    /// The request was rejected by validation; the detail is in [`InvalidKind`].
    Invalid(InvalidKind),
    /// The device was shut down while the request was queued.
    Shutdown,
    /// The context ran out of bio slots and could not free one by reaping
    /// its own completions (every slot holds a completion the caller has not
    /// polled), or no tag came free within the request timeout plus a grace
    /// period (other contexts on the queue keep theirs plugged), or the
    /// queue stayed frozen that long (Linux `BLK_STS_RESOURCE`).
    Resource,
}

impl Status {
    /// True for [`Status::Ok`].
    #[inline]
    pub fn is_ok(self) -> bool {
        matches!(self, Status::Ok)
    }

    /// The errno a POSIX caller would see for this status (0 for success).
    pub fn errno(self) -> i32 {
        match self {
            Status::Ok => 0,
            Status::IoError | Status::Medium => libc::EIO,
            Status::Timeout => libc::ETIMEDOUT,
            Status::NoSpace => libc::ENOSPC,
            Status::NotSupported => libc::EOPNOTSUPP,
            Status::Invalid(InvalidKind::ReadOnly) => libc::EROFS,
            Status::Invalid(InvalidKind::OutOfRange) => libc::ENOSPC,
            Status::Invalid(_) => libc::EINVAL,
            Status::Shutdown => libc::ENODEV,
            Status::Resource => libc::EAGAIN,
        }
    }

    /// Map a kernel errno (positive) to a status, for drivers backed by syscalls.
    pub fn from_errno(errno: i32) -> Status {
        match errno {
            0 => Status::Ok,
            libc::ETIMEDOUT => Status::Timeout,
            libc::ENOSPC | libc::EDQUOT => Status::NoSpace,
            libc::EOPNOTSUPP => Status::NotSupported,
            libc::EINVAL => Status::Invalid(InvalidKind::Driver),
            libc::EROFS | libc::EPERM => Status::Invalid(InvalidKind::ReadOnly),
            libc::EAGAIN => Status::Resource,
            _ => Status::IoError,
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Status::Ok => "ok",
            Status::IoError => "I/O error",
            Status::Timeout => "timed out",
            Status::NoSpace => "no space left on device",
            Status::NotSupported => "operation not supported",
            Status::Medium => "medium error",
            Status::Invalid(k) => return write!(f, "invalid request ({k:?})"),
            Status::Shutdown => "device shut down",
            Status::Resource => {
                "out of bio slots or tags: poll the context's completions, and unplug the queue's other contexts"
            }
        };
        f.write_str(s)
    }
}

/// Why validation rejected a bio. Kept to one byte so [`Status`] stays small.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum InvalidKind {
    /// The range runs past the device's capacity.
    OutOfRange,
    /// The length is not a multiple of the logical block size.
    BadLength,
    /// The length is zero.
    ZeroLength,
    /// A buffer segment breaks the device's DMA alignment.
    Misaligned,
    /// A write-type operation on a read-only device.
    ReadOnly,
    /// More segments than the queue limit allows.
    TooManySegments,
    /// The operation is not offered by this device.
    Unsupported,
    /// The driver answered EINVAL.
    Driver,
}

/// The typed error of the core layer.
#[derive(Debug, thiserror::Error, Clone)]
pub enum Error {
    /// An I/O range beyond the end of the device.
    #[error("{device}: {op} at offset {offset_bytes} of {len_bytes} bytes runs past the capacity of {capacity_bytes} bytes")]
    OutOfRange {
        /// Device name.
        device: Arc<str>,
        /// Operation.
        op: Op,
        /// Byte offset of the I/O.
        offset_bytes: u64,
        /// Length in bytes.
        len_bytes: u64,
        /// Device capacity in bytes.
        capacity_bytes: u64,
    },
    /// A length or offset that is not a multiple of the logical block size.
    #[error("{device}: {op} at offset {offset_bytes} of {len_bytes} bytes is not a multiple of the logical block size {logical_block_size}")]
    BadLength {
        /// Device name.
        device: Arc<str>,
        /// Operation.
        op: Op,
        /// Byte offset of the I/O.
        offset_bytes: u64,
        /// Length in bytes.
        len_bytes: u64,
        /// The device's logical block size.
        logical_block_size: u32,
    },
    /// A zero-length data I/O.
    #[error("{device}: {op} at offset {offset_bytes} has zero length; the minimum is one logical block of {logical_block_size} bytes")]
    ZeroLength {
        /// Device name.
        device: Arc<str>,
        /// Operation.
        op: Op,
        /// Byte offset of the I/O.
        offset_bytes: u64,
        /// The device's logical block size.
        logical_block_size: u32,
    },
    /// A buffer segment that breaks the DMA alignment.
    #[error("{device}: {op} at offset {offset_bytes}: buffer segment {segment} at address {addr:#x} length {len_bytes} is not aligned to the device's DMA alignment of {alignment} bytes")]
    Misaligned {
        /// Device name.
        device: Arc<str>,
        /// Operation.
        op: Op,
        /// Byte offset of the I/O.
        offset_bytes: u64,
        /// Index of the offending segment.
        segment: usize,
        /// Its address.
        addr: usize,
        /// Its length.
        len_bytes: u32,
        /// The required alignment in bytes.
        alignment: u32,
    },
    /// A write-type operation on a read-only device.
    #[error("{device}: {op} at offset {offset_bytes} on a read-only device")]
    ReadOnly {
        /// Device name.
        device: Arc<str>,
        /// Operation.
        op: Op,
        /// Byte offset of the I/O.
        offset_bytes: u64,
    },
    /// A bio with more segments than the queue allows.
    #[error("{device}: {op} at offset {offset_bytes} has {segments} segments; the limit is {max_segments}")]
    TooManySegments {
        /// Device name.
        device: Arc<str>,
        /// Operation.
        op: Op,
        /// Byte offset of the I/O.
        offset_bytes: u64,
        /// Segments in the bio.
        segments: usize,
        /// The queue's `max_segments`.
        max_segments: u32,
    },
    /// The device does not offer this operation.
    #[error("{device}: {op} at offset {offset_bytes} is not supported by this device")]
    Unsupported {
        /// Device name.
        device: Arc<str>,
        /// Operation.
        op: Op,
        /// Byte offset of the I/O.
        offset_bytes: u64,
    },
    /// The driver completed the I/O with an error.
    #[error("{device}: {op} at offset {offset_bytes} of {len_bytes} bytes failed: {status}")]
    Io {
        /// Device name.
        device: Arc<str>,
        /// Operation.
        op: Op,
        /// Byte offset of the I/O.
        offset_bytes: u64,
        /// Length in bytes.
        len_bytes: u64,
        /// The driver's status.
        status: Status,
    },
    /// A submission that could not be accepted now: every bio slot of the
    /// context holds a completion the caller has not polled yet.
    #[error("{device}: {op} at offset {offset_bytes}: all {slots} bio slots of this context hold completions that were not polled yet; call Context::poll, then submit again")]
    Unpolled {
        /// Device name.
        device: Arc<str>,
        /// Operation.
        op: Op,
        /// Byte offset of the I/O.
        offset_bytes: u64,
        /// Bio slots of the context (`bioset_size`).
        slots: usize,
    },
    /// A malformed device spec string or option.
    #[error("invalid device spec {spec:?}: {reason}")]
    Spec {
        /// The spec (or option) as given.
        spec: String,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// A group (see [`crate::blkcg`]) could not be created, found,
    /// changed or removed.
    #[error("{device}: group {group:?}: {key}: {reason}")]
    Group {
        /// Device name.
        device: Arc<str>,
        /// The group's name.
        group: String,
        /// The setting (`weight`, `riops`, …) or the operation at fault.
        key: &'static str,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// A device could not be created or configured.
    #[error("{device}: {reason}")]
    Setup {
        /// Device name.
        device: Arc<str>,
        /// What failed.
        reason: String,
    },
}

impl Error {
    /// The status this error maps to.
    pub fn status(&self) -> Status {
        match self {
            Error::OutOfRange { .. } => Status::Invalid(InvalidKind::OutOfRange),
            Error::BadLength { .. } => Status::Invalid(InvalidKind::BadLength),
            Error::ZeroLength { .. } => Status::Invalid(InvalidKind::ZeroLength),
            Error::Misaligned { .. } => Status::Invalid(InvalidKind::Misaligned),
            Error::ReadOnly { .. } => Status::Invalid(InvalidKind::ReadOnly),
            Error::TooManySegments { .. } => Status::Invalid(InvalidKind::TooManySegments),
            Error::Unsupported { .. } => Status::Invalid(InvalidKind::Unsupported),
            Error::Io { status, .. } => *status,
            Error::Unpolled { .. } => Status::Resource,
            Error::Spec { .. } | Error::Setup { .. } | Error::Group { .. } => {
                Status::Invalid(InvalidKind::Driver)
            }
        }
    }

    /// Shorthand for a spec error.
    pub fn spec(spec: impl Into<String>, reason: impl Into<String>) -> Error {
        Error::Spec {
            spec: spec.into(),
            reason: reason.into(),
        }
    }
}

impl From<Error> for std::io::Error {
    /// The errno of the error's status, with the typed error as the source,
    /// so `?` works in functions that return `std::io::Result`.
    fn from(e: Error) -> std::io::Error {
        use std::io::ErrorKind as K;
        let kind = match &e {
            Error::OutOfRange { .. } => K::InvalidInput,
            Error::BadLength { .. }
            | Error::ZeroLength { .. }
            | Error::Misaligned { .. }
            | Error::TooManySegments { .. }
            | Error::Spec { .. }
            | Error::Group { .. } => K::InvalidInput,
            Error::ReadOnly { .. } => K::ReadOnlyFilesystem,
            Error::Unsupported { .. } => K::Unsupported,
            Error::Unpolled { .. } => K::WouldBlock,
            Error::Setup { .. } => K::Other,
            Error::Io { status, .. } => match status {
                Status::Timeout => K::TimedOut,
                Status::NoSpace => K::StorageFull,
                Status::NotSupported => K::Unsupported,
                Status::Resource => K::WouldBlock,
                Status::Shutdown => K::NotConnected,
                _ => K::Other,
            },
        };
        std::io::Error::new(kind, e)
    }
}

/// Result alias for the core.
pub type Result<T, E = Error> = std::result::Result<T, E>;
