//! What can be wrong with an image: each error names the image, the
//! offset (in the image file, or in the guest's address space) and the
//! limit it broke. Converted to the core's [`mqblk_core::Error::Setup`] at
//! open, and to an I/O status on the data path.

use std::sync::Arc;

/// A problem with a qcow2 image, its metadata or its use.
#[derive(Debug, thiserror::Error)]
pub enum Qcow2Error {
    /// A header field out of its range.
    #[error("{image}: header field {field} at offset {offset} is {value}; {limit}")]
    Header {
        /// The image file.
        image: Arc<str>,
        /// The field's name in QEMU's `docs/interop/qcow2.txt`.
        field: &'static str,
        /// The field's byte offset in the header.
        offset: u64,
        /// Its value.
        value: u64,
        /// The rule it broke.
        limit: String,
    },
    /// A table or cluster offset read from the image that is misaligned
    /// or points past what the file can hold.
    #[error("{image}: {what} at file offset {offset} (read from {from}) {limit}")]
    Offset {
        /// The image file.
        image: Arc<str>,
        /// What the offset locates (`L2 table`, `refcount block`, ...).
        what: &'static str,
        /// The offset.
        offset: u64,
        /// Where it was read from (`L1 entry 3`, `header`).
        from: String,
        /// The rule it broke.
        limit: String,
    },
    /// Two pieces of metadata claim the same bytes of the file.
    #[error("{image}: {a} at [{a_start}, {a_end}) overlaps {b} at [{b_start}, {b_end})")]
    Overlap {
        /// The image file.
        image: Arc<str>,
        /// The first piece.
        a: String,
        /// Its start.
        a_start: u64,
        /// Its end.
        a_end: u64,
        /// The second piece.
        b: String,
        /// Its start.
        b_start: u64,
        /// Its end.
        b_end: u64,
    },
    /// Something the format allows that this driver does not do.
    #[error("{image}: {what}")]
    Unsupported {
        /// The image file.
        image: Arc<str>,
        /// What, and what to do instead.
        what: String,
    },
    /// The backing chain comes back to an image already in it.
    #[error("{image}: backing file {backing} is already in the chain ({chain}): a loop")]
    BackingLoop {
        /// The image whose backing file closes the loop.
        image: Arc<str>,
        /// The backing file.
        backing: String,
        /// The chain so far, top first.
        chain: String,
    },
    /// A compressed cluster that does not decompress to one cluster.
    #[error("{image}: compressed cluster at guest offset {guest_offset} (file offset {offset}, {len} bytes): {why}")]
    Compressed {
        /// The image file.
        image: Arc<str>,
        /// Guest offset of the cluster.
        guest_offset: u64,
        /// File offset of the compressed data.
        offset: u64,
        /// Compressed length.
        len: u64,
        /// The decoder's complaint.
        why: String,
    },
    /// The file would have to grow past the room the data device has.
    #[error(
        "{image}: allocating cluster at file offset {offset} would pass the limit of {limit} bytes"
    )]
    NoSpace {
        /// The image file.
        image: Arc<str>,
        /// Where the cluster would go.
        offset: u64,
        /// The limit.
        limit: u64,
    },
    /// A read or write of the image file failed.
    #[error("{image}: {what} of {len} bytes at file offset {offset}: {source}")]
    Io {
        /// The image file.
        image: Arc<str>,
        /// `read` or `write` of what.
        what: &'static str,
        /// Where.
        offset: u64,
        /// How much.
        len: u64,
        /// The system's error.
        source: std::io::Error,
    },
}

impl Qcow2Error {
    /// The core's error for a failure at open, naming the device.
    pub fn into_setup(self, device: &str) -> mqblk_core::Error {
        mqblk_core::Error::Setup {
            device: device.into(),
            reason: self.to_string(),
        }
    }
}

/// Results of this crate.
pub type Result<T> = std::result::Result<T, Qcow2Error>;
